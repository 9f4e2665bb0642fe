"""``rlog chaos kill|terminate|pause|resume|restart TARGET``: faults on command, Pumba's verbs;
``rlog chaos partition|heal|delay|disk|lose-answers``: network and disk faults inside the
brokers.

TARGET is ``broker-N`` or ``controller``. The request goes to the running rlogd's control socket
(``DATA_DIR/rlogd.sock``), which signals its own child or rewrites a broker's fault rules:
nothing here signals a process itself. Each command prints one line saying what happened
(``--json``: rlogd's whole reply).
"""

from __future__ import annotations

from typing import Annotated, Any

import typer

from rlog.cli import nemesis
from rlog.cli.discovery import DataDirOption, control_request, settings_of
from rlog.cli.terminal import CliError, ExitCode
from rlog.daemon.faults_file import LOSE_ANSWERS_MAX

app = typer.Typer(
    help="Kill, stop, pause, resume or restart a process; cut links, slow a broker, break a "
    "disk, lose answers. The link, delay, disk and lose-answers verbs return once the brokers "
    "have the new rules in force (a paused broker once resumed; the answer says so), so what a "
    "client sends next meets them.",
    no_args_is_help=True,
)

# terminate and restart wait for a clean stop, which rlogd bounds by shutdown_timeout_ms.
SLOW_OP_TIMEOUT_S = 90.0
QUICK_OP_EXTRA_S = 10.0  # kill waits to see the process gone

TargetArgument = Annotated[
    str,
    typer.Argument(metavar="TARGET", help="broker-N or controller.", show_default=False),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print rlogd's reply as JSON.")]


def _apply(ctx: typer.Context, request: dict[str, Any], data_dir: Any, json_out: bool) -> None:
    """Send one control request to rlogd and print its one-line answer (or its reply as JSON)."""
    settings = settings_of(ctx).override(data_dir=data_dir)
    op = request["op"]
    if op in ("terminate", "restart"):
        timeout_s = max(settings.timeout_s, SLOW_OP_TIMEOUT_S)
    else:
        timeout_s = settings.timeout_s + QUICK_OP_EXTRA_S
    label = f"{op} {request['target']}" if "target" in request else op
    reply = control_request(settings, request, timeout_s)
    if not reply.get("ok"):
        code = ExitCode.NOT_FOUND if reply.get("reason") == "unknown-target" else ExitCode.FAILURE
        raise CliError(f"{label}: {reply.get('error') or 'refused by rlogd'}", code)
    if json_out:
        settings.terminal.json(reply)
    else:
        settings.terminal.line(str(reply.get("message") or f"{label}: done"))


@app.command(no_args_is_help=True)
def kill(
    ctx: typer.Context,
    target: TargetArgument,
    stay_down: Annotated[
        bool,
        typer.Option(
            "--stay-down",
            help="Keep it down whatever the restart policy, until rlog chaos restart TARGET.",
        ),
    ] = False,
    data_dir: DataDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """SIGKILL the process, as a crash: the restart policy then applies (on-failure and always
    restart it after the backoff), unless --stay-down keeps it down (state failed) until
    rlog chaos restart TARGET starts it."""
    request: dict[str, Any] = {"op": "kill", "target": target}
    if stay_down:
        request["stay_down"] = True
    _apply(ctx, request, data_dir, json_out)


@app.command(no_args_is_help=True)
def terminate(
    ctx: typer.Context,
    target: TargetArgument,
    data_dir: DataDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """SIGTERM the process and wait for it to exit (SIGKILL after shutdown_timeout_ms): a clean
    stop, which the on-failure policy leaves stopped until rlog chaos restart."""
    _apply(ctx, {"op": "terminate", "target": target}, data_dir, json_out)


@app.command(no_args_is_help=True)
def pause(
    ctx: typer.Context,
    target: TargetArgument,
    data_dir: DataDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """SIGSTOP the process: it holds its connections but answers nothing until resumed."""
    _apply(ctx, {"op": "pause", "target": target}, data_dir, json_out)


@app.command(no_args_is_help=True)
def resume(
    ctx: typer.Context,
    target: TargetArgument,
    data_dir: DataDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """SIGCONT a paused process."""
    _apply(ctx, {"op": "resume", "target": target}, data_dir, json_out)


@app.command(no_args_is_help=True)
def restart(
    ctx: typer.Context,
    target: TargetArgument,
    data_dir: DataDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """Stop the process cleanly (resuming it first if paused) and start it again now, whatever
    the restart policy; a stopped process is just started."""
    _apply(ctx, {"op": "restart", "target": target}, data_dir, json_out)


# ---- network and disk ----


@app.command(no_args_is_help=True)
def partition(
    ctx: typer.Context,
    targets: Annotated[
        list[str],
        typer.Argument(
            metavar="TARGET...", help="Two or more of broker-N and controller.", show_default=False
        ),
    ],
    clients: Annotated[
        bool, typer.Option("--clients", help="Also cut Kafka clients off the first broker named.")
    ] = False,
    data_dir: DataDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """Cut the network links between these processes, both ways, inside the brokers' network
    layer (requests from a cut peer close their connection; requests to it fail), until
    rlog chaos heal. The cut outlives a restart of the broker."""
    _apply(ctx, {"op": "partition", "targets": targets, "clients": clients}, data_dir, json_out)


@app.command()
def heal(ctx: typer.Context, data_dir: DataDirOption = None, json_out: JsonOption = False) -> None:
    """Undo every partition, delay, disk fault and lose-answers rule."""
    _apply(ctx, {"op": "heal"}, data_dir, json_out)


@app.command(no_args_is_help=True)
def delay(
    ctx: typer.Context,
    target: TargetArgument,
    ms: Annotated[int, typer.Option("--ms", help="Added delay per request, in and out.")],
    data_dir: DataDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """Make a broker slow: every request it receives or sends waits MS first (0 undoes it)."""
    _apply(ctx, {"op": "delay", "target": target, "ms": ms}, data_dir, json_out)


@app.command(no_args_is_help=True)
def disk(
    ctx: typer.Context,
    target: TargetArgument,
    state: Annotated[
        str,
        typer.Argument(metavar="STATE", help="full, stall or ok.", show_default=False),
    ],
    data_dir: DataDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """Break a broker's disk: full (appends and checkpoints fail with ENOSPC), stall (every log
    write and fsync hangs 2 s), ok. Full or stall takes the broker's log dir offline: its
    partitions answer KAFKA_STORAGE_ERROR and its leaderships move to in-sync replicas; after
    ok it restarts and catches up."""
    _apply(ctx, {"op": "disk", "target": target, "state": state}, data_dir, json_out)


@app.command("lose-answers", no_args_is_help=True)
def lose_answers(
    ctx: typer.Context,
    target: Annotated[str, typer.Argument(metavar="TARGET", help="broker-N.", show_default=False)],
    count: Annotated[
        int,
        typer.Option(
            "--count",
            metavar="N",
            min=0,
            max=LOSE_ANSWERS_MAX,
            help="How many answers to lose (0 answers every Produce again).",
        ),
    ] = 1,
    data_dir: DataDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """Kafka's classic duplicate: the broker appends a client's Produce (acks 1 or all), then
    drops the answer and closes the connection, for the next COUNT such requests. The client
    retries a batch the log already holds, which writes it twice unless the producer is
    idempotent. Each run arms COUNT fresh losses, even one repeating the last count; heal or
    --count 0 disarms what is left. A broker restarted while the rule stands loses COUNT
    answers again. Only Kafka clients' requests are affected."""
    _apply(ctx, {"op": "lose-answers", "target": target, "count": count}, data_dir, json_out)


@app.command()
def schedule(
    ctx: typer.Context,
    seconds: Annotated[float, typer.Option("--seconds", help="How long the faults go on.")],
    seed: Annotated[int, typer.Option("--seed", help="Decides the whole plan: replay with it.")],
    brokers: Annotated[
        int | None,
        typer.Option("--brokers", help="Plan for this many brokers (default: the cluster's)."),
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the plan; change nothing.")
    ] = False,
    data_dir: DataDirOption = None,
) -> None:
    """A random, reproducible sequence of faults, one at a time, each undone before the next
    (kill, pause/resume, partition/heal, an isolated broker, delay, full or stalled disk);
    everything is healed at the end. The same seed gives the same plan."""
    settings = settings_of(ctx).override(data_dir=data_dir)
    terminal = settings.terminal
    if seconds <= 0:
        raise CliError("--seconds must be positive", ExitCode.USAGE)
    if brokers is None:
        status = control_request(settings, {"op": "status"})
        names = [b["name"] for b in status.get("brokers", [])]
    else:
        if brokers < 1:
            raise CliError("--brokers must be at least 1", ExitCode.USAGE)
        names = [f"broker-{i}" for i in range(1, brokers + 1)]
    steps = nemesis.plan(seed, seconds, names)
    if dry_run:
        terminal.lines(step.describe() for step in steps)
        return

    def apply(request: dict[str, Any]) -> dict[str, Any]:
        timeout_s = SLOW_OP_TIMEOUT_S if request["op"] == "restart" else settings.timeout_s + 10
        return control_request(settings, request, timeout_s)

    refused = nemesis.run(steps, apply, terminal.line)
    terminal.note(
        f"{len(steps)} steps from seed {seed}; {refused} refused; replay with --seed {seed}"
    )
