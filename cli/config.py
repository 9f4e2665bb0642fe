"""``rlog config get [KEY]`` and ``rlog config set KEY VALUE``: the running cluster's settings.

Both go through rlogd's control socket. ``set`` edits the config file rlogd runs with: the
cluster's own copy, DATA_DIR/rlog.toml, which ``rlog cluster up`` makes (copying --config FILE
there, so the file given is never edited); ``rlog config path`` prints it. The edit (one line;
comments and order kept) is taken exactly as a hand edit of the copy would be: dynamic keys
(retention, min.insync.replicas, unclean election, the ISR lag time, flush settings) apply to
the running brokers at once, rlogd's restart settings to rlogd, and any other key is written but
reported as needing a restart. An invalid value changes nothing.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rlog.cli.discovery import DataDirOption, control_request, running_cluster, settings_of
from rlog.cli.terminal import CliError, ExitCode
from rlog.daemon.data_dir import config_path

app = typer.Typer(help="Show or change the running cluster's settings.", no_args_is_help=True)

JsonOption = Annotated[bool, typer.Option("--json", help="Print rlogd's reply as JSON.")]


def _ask(ctx: typer.Context, request: dict[str, Any], data_dir: Any) -> tuple[Any, dict]:
    settings = settings_of(ctx).override(data_dir=data_dir)
    reply = control_request(settings, request, settings.timeout_s + 20)
    if not reply.get("ok"):
        code = ExitCode.USAGE if reply.get("reason") == "bad-request" else ExitCode.FAILURE
        raise CliError(str(reply.get("error") or "refused by rlogd"), code)
    return settings, reply


@app.command()
def get(
    ctx: typer.Context,
    key: Annotated[
        str | None, typer.Argument(metavar="[KEY]", help="One key; all when left out.")
    ] = None,
    data_dir: DataDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """The settings in force, as the config file names them ([cluster] and [broker] keys)."""
    settings, reply = _ask(ctx, {"op": "config"}, data_dir)
    tables: dict[str, dict[str, Any]] = reply["config"]
    rows = [(table, name, value) for table, keys in tables.items() for name, value in keys.items()]
    if key is not None:
        rows = [row for row in rows if row[1] == key]
        if not rows:
            raise CliError(f"{key}: unknown key (rlog config get lists them)", ExitCode.NOT_FOUND)
    if json_out:
        settings.terminal.json({name: value for _, name, value in rows})
        return
    width = max(len(name) for _, name, _ in rows)
    for table, name, value in rows:
        shown = str(value).lower() if isinstance(value, bool) else value
        settings.terminal.line(f"[{table}] {name:<{width}}  {shown}")
    if reply.get("needs_restart"):
        settings.terminal.note("edited, needs a restart: " + ", ".join(reply["needs_restart"]))


@app.command(no_args_is_help=True)
def set(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(metavar="KEY", show_default=False)],
    value: Annotated[str, typer.Argument(metavar="VALUE", show_default=False)],
    data_dir: DataDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """Set KEY in the cluster's config file (rlog config path) and apply it to the running
    cluster: dynamic keys at once, rlogd's restart settings to rlogd, others at the next start."""
    settings, reply = _ask(ctx, {"op": "config_set", "key": key, "value": value}, data_dir)
    if json_out:
        settings.terminal.json(reply)
    else:
        settings.terminal.line(f"{key} = {value}: {reply.get('message')}")


@app.command("path")
def show_path(ctx: typer.Context, data_dir: DataDirOption = None) -> None:
    """The config file the cluster uses, which set edits and rlogd watches: DATA_DIR/rlog.toml,
    the copy rlog cluster up makes of --config FILE."""
    settings = settings_of(ctx).override(data_dir=data_dir)
    running = running_cluster(settings.data_dir)
    if running is not None:
        if running.config is None:  # an rlogd started by hand without --config
            raise CliError(
                f"the cluster in {settings.data_dir} runs without a config file", ExitCode.NOT_FOUND
            )
        settings.terminal.line(running.config)
        return
    copy = config_path(settings.data_dir)
    if not copy.exists():
        raise CliError(
            f"{settings.data_dir} has no config yet: rlog cluster up makes {copy}",
            ExitCode.NOT_FOUND,
        )
    settings.terminal.line(str(copy.resolve()))
