"""The ``rlog`` command: the root options, the command tree, and the one place errors print.

Commands live one group per module (cluster, topic, produce, consume, group, txn, acl, user,
bench, chaos, events) and stay thin. ``main`` runs click in non-standalone mode so that every
failure, including click's own usage errors, comes out as a single ``rlog: error: ...`` line
with an :class:`ExitCode`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

try:  # typer >= 0.20 ships its own copy of click; older ones use click itself
    from typer._click import exceptions as click_errors
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import exceptions as click_errors  # type: ignore[no-redef]

from rlog import __version__
from rlog.cli import (
    acl,
    bench,
    chaos,
    cluster,
    config,
    consume,
    events,
    group,
    manpages,
    produce,
    topic,
    txn,
    user,
)
from rlog.cli.discovery import ENV_BOOTSTRAP, ENV_DATA_DIR, Settings, default_data_dir
from rlog.cli.terminal import CliError, ColorMode, ExitCode, Terminal, one_line
from rlog.cli.tui.command import tui
from rlog.cli.verify.command import verify

app = typer.Typer(
    name="rlog",
    help="Run and use a local rlog cluster: a Kafka-compatible log broker.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
app.add_typer(cluster.app, name="cluster")
app.add_typer(topic.app, name="topic")
app.command("produce", no_args_is_help=True)(produce.produce)
app.command("consume", no_args_is_help=True)(consume.consume)
app.add_typer(group.app, name="group")
app.add_typer(txn.app, name="txn")
app.add_typer(acl.app, name="acl")
app.add_typer(user.app, name="user")
app.add_typer(bench.app, name="bench")
app.add_typer(chaos.app, name="chaos")
app.add_typer(config.app, name="config")
app.command("events")(events.events)
app.command("verify")(verify)
app.command("man")(manpages.man)
app.command("tui")(tui)


_ERROR_TERMINAL: list[Terminal] = []  # the root callback's terminal, once it has run


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rlog {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    bootstrap: Annotated[
        str | None,
        typer.Option(
            "--bootstrap",
            "-b",
            envvar=list(ENV_BOOTSTRAP),
            help="Broker addresses host:port,... [env: RLOG_BOOTSTRAP or RLOG_BROKERS; "
            "default: the running cluster in --data-dir]",
            show_default=False,
            show_envvar=False,
        ),
    ] = None,
    data_dir: Annotated[
        Path | None,
        typer.Option(
            "--data-dir",
            envvar=ENV_DATA_DIR,
            help="Cluster data directory [env: RLOG_DATA_DIR; "
            "default: $XDG_DATA_HOME/rlog or ~/.local/share/rlog]",
            show_default=False,
            show_envvar=False,
            file_okay=False,
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout",
            envvar="RLOG_TIMEOUT",
            min=0.1,
            help="Seconds to wait for the cluster's answers [env: RLOG_TIMEOUT]",
            show_envvar=False,
        ),
    ] = 10.0,
    color: Annotated[
        ColorMode,
        typer.Option(
            "--color",
            envvar="RLOG_COLOR",
            help="Colour output: auto (only on a TTY, off with NO_COLOR), always, never "
            "[env: RLOG_COLOR]",
            show_envvar=False,
            case_sensitive=False,
        ),
    ] = ColorMode.AUTO,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            envvar="RLOG_VERBOSE",
            help="Show librdkafka's log lines on stderr [env: RLOG_VERBOSE]",
            show_envvar=False,
        ),
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Run and use a local rlog cluster: a Kafka-compatible log broker."""
    terminal = Terminal(color=color)
    _ERROR_TERMINAL[:] = [terminal]  # so main() prints errors honouring --color too
    ctx.obj = Settings(
        terminal=terminal,
        bootstrap=bootstrap or None,
        data_dir=(data_dir or default_data_dir()).expanduser(),
        timeout_s=timeout,
        verbose=verbose,
    )


def _usage_line(error: click_errors.UsageError) -> str:
    where = error.ctx.command_path if error.ctx is not None else "rlog"
    # typer's choice checks go through pydantic-style validation that prefixes "Value error, "
    message = one_line(error.format_message()).replace(": Value error, ", ": ")
    return f"{message} (see '{where} --help')"


# The root's options that a command does not repeat: given after the command (`rlog consume T
# --timeout 5`), they are moved in front of it, where click looks for them.
GLOBAL_VALUE_OPTIONS = frozenset({"--bootstrap", "-b", "--data-dir", "--timeout", "--color"})
GLOBAL_FLAGS = frozenset({"--verbose", "-v"})


def hoist_global_options(root: Any, args: list[str]) -> list[str]:
    """`args` with the root options found after the command moved before it, unless the
    command has an option of that name itself (`rlog bench consume --timeout` is its own)."""
    command, i = root, 0
    while i < len(args) and hasattr(command, "commands"):
        token = args[i]
        if token.startswith("-"):
            name = token.split("=", 1)[0]
            i += 2 if name in GLOBAL_VALUE_OPTIONS and "=" not in token else 1
            continue
        if token not in command.commands:
            return args  # click will say what is wrong
        command, i = command.commands[token], i + 1
    if hasattr(command, "commands"):
        return args
    own: dict[str, bool] = {}  # the command's option names -> whether they take a value
    for param in command.params:
        for name in [*param.opts, *getattr(param, "secondary_opts", [])]:
            own[name] = not getattr(param, "is_flag", False) and param.param_type_name == "option"
    hoisted: list[str] = []
    kept = args[:i]
    rest = args[i:]
    j = 0
    while j < len(rest):
        token = rest[j]
        if token == "--":
            kept += rest[j:]
            break
        name = token.split("=", 1)[0]
        takes_value = "=" not in token
        if name in own:
            step = 2 if own[name] and takes_value else 1
            kept += rest[j : j + step]
        elif name in GLOBAL_FLAGS and takes_value:
            hoisted.append(token)
            step = 1
        elif name in GLOBAL_VALUE_OPTIONS:
            step = 2 if takes_value else 1
            hoisted += rest[j : j + step]
        else:
            kept.append(token)
            step = 1
        j += step
    return hoisted + kept


def main(argv: Sequence[str] | None = None) -> int:
    """Console-script entry point: run the command, print any error as one line, exit."""
    args = bench.expand_multi_value_flags(list(sys.argv[1:] if argv is None else argv))
    terminal = Terminal(color=ColorMode(os.environ.get("RLOG_COLOR", "auto").lower()))
    command = typer.main.get_command(app)
    args = hoist_global_options(command, args)
    try:
        result = command.main(args=args, prog_name="rlog", standalone_mode=False)
    except CliError as error:
        terminal = _ERROR_TERMINAL[0] if _ERROR_TERMINAL else terminal
        terminal.error(error.message, error.details)
        return int(error.code)
    except click_errors.NoArgsIsHelpError as error:
        terminal.line(error.ctx.get_help() if error.ctx is not None else "")
        return int(ExitCode.USAGE)
    except click_errors.UsageError as error:
        terminal.error(_usage_line(error))
        return int(ExitCode.USAGE)
    except click_errors.ClickException as error:
        terminal.error(error.format_message())
        return int(error.exit_code)
    except typer.Abort:
        return int(ExitCode.INTERRUPTED)
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)
    except BrokenPipeError:
        # The reader went away (`rlog consume t | head`): not an error; silence the final flush.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return int(ExitCode.OK)
    return int(result) if isinstance(result, int) else int(ExitCode.OK)


if __name__ == "__main__":
    sys.exit(main())
