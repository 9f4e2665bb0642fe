"""``rlog cluster up|status|disks|down|purge``: a local cluster, like ``rpk container`` without
Docker.

``up`` gives the cluster its own config, ``DATA_DIR/rlog.toml`` (a copy of ``--config FILE``,
which is never edited), starts rlogd detached with it (its own session, output to
``DATA_DIR/rlogd.log``) and returns once the controller and every broker answer ApiVersions and
every broker has registered with the controller (broker-1's Metadata lists them all).
``status`` shows a row per process (controller and brokers). ``down`` signals the rlogd
recorded in ``DATA_DIR/rlogd.json`` and only ever kills a process whose command line shows it is
the rlogd of that data dir. ``disks`` shows each broker's log dir, its volume's space and what
each partition replica takes there (disks.py).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import psutil
import typer

from rlog.cli import disks as disk_views
from rlog.cli.discovery import (
    BootstrapOption,
    BrokerState,
    ClusterState,
    DataDirOption,
    Settings,
    bootstrap_of,
    broker_answers,
    is_rlogd_of,
    not_running_error,
    read_json,
    running_cluster,
    settings_of,
)
from rlog.cli.terminal import CliError, ExitCode, Terminal, megabytes, short_duration
from rlog.core.protocol.apis import ApiKey
from rlog.daemon.data_dir import (
    LAUNCH_FILE,
    config_backup_path,
    config_path,
    launch_path,
    rlogd_log_path,
    status_path,
)
from rlog.daemon.wire import BlockingKafkaClient, WireError

app = typer.Typer(help="Start, inspect, stop and remove a local cluster.", no_args_is_help=True)

DEFAULT_BASE_PORT = 9092
STOP_GRACE_S = 20.0
LOG_TAIL_LINES = 20
GAVE_UP = {"failed", "stopped"}  # process states rlogd does not restart from
STATE_COLORS = {
    "running": "green",
    "yes": "green",
    "no": "red",
    "stopped": "red",
    "failed": "red",
    "paused": "yellow",
    "restarting": "yellow",
}

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


@dataclass(frozen=True)
class LaunchPlan:
    brokers: int
    base_port: int
    config: Path  # the data dir's own copy (DATA_DIR/rlog.toml)


def _plan(data_dir: Path, brokers: int | None, base_port: int | None, config: Path) -> LaunchPlan:
    """Flags first, then the data dir's last launch (cluster.json), then defaults."""
    previous = read_json(launch_path(data_dir)) or {}
    return LaunchPlan(
        brokers=brokers or int(previous.get("brokers") or 1),
        base_port=base_port or int(previous.get("base_port") or DEFAULT_BASE_PORT),
        config=config,
    )


# A data dir's config when `rlog cluster up` was given none: only comments, so every key has
# its default, and a file for `rlog config set` to edit and rlogd to watch.
NEW_CONFIG_HEADER = """\
# The config of the rlog cluster in this data dir, made by `rlog cluster up`. rlogd reads it at
# start and watches it: `rlog config set KEY VALUE` edits it, and so may you. rlog.toml(5) lists
# every key with its default. `rlog cluster up --brokers/--base-port` override [cluster] here.
"""


def _cluster_config(terminal: Terminal, data_dir: Path, given: Path | None) -> Path:
    """The cluster's own copy of its config, DATA_DIR/rlog.toml, which rlogd watches and
    `rlog config set` edits: --config FILE is copied there (never edited itself), and an older
    copy that differs is kept as a backup; without --config the copy stays as it is, or is made
    (from the file an older launch named, else with only a header)."""
    copy = config_path(data_dir)
    if given is None and not copy.exists():
        previous = (read_json(launch_path(data_dir)) or {}).get("config")
        if previous and Path(previous) != copy:  # started before clusters kept a copy
            given = Path(previous)
            if not given.is_file():
                raise CliError(
                    f"{launch_path(data_dir)} names the config {given}, which is gone; start "
                    "with --config FILE",
                    ExitCode.USAGE,
                )
    if given is None or given.resolve() == copy.resolve():
        if not copy.exists():
            _write_atomically(copy, NEW_CONFIG_HEADER.encode())
        return copy
    from rlog.daemon.config import ConfigError, load_config

    try:
        text = given.read_bytes()
        load_config(given)  # a broken file must not replace a working copy
    except (OSError, ConfigError) as error:
        raise CliError(f"--config: {error}", ExitCode.USAGE) from None
    if copy.exists():
        if copy.read_bytes() == text:
            return copy
        backup = config_backup_path(data_dir, time.strftime("%Y%m%d-%H%M%S"))
        os.replace(copy, backup)
        terminal.note(f"Using {given} as {copy}; the copy it replaces is kept as {backup}.")
    else:
        terminal.note(f"Copied {given} to {copy}: the cluster uses (and rlog config set edits) it.")
    _write_atomically(copy, text)
    return copy


def _write_atomically(path: Path, data: bytes) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_bytes(data)
    os.replace(temporary, path)


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return [f"  | {line}" for line in text.splitlines()[-lines:]]


def _failure_details(data_dir: Path, state: ClusterState | None) -> list[str]:
    """The tail of rlogd's log, then of each process's log that does not answer."""
    rlogd_log = rlogd_log_path(data_dir)
    details = [f"last lines of {rlogd_log}:", *_log_tail(rlogd_log)]
    for broker in state.processes if state is not None else ():
        tls = state.tls_for(broker) if state is not None else None
        if broker.log and not broker_answers(broker.host, broker.port, timeout_s=0.2, tls=tls):
            tail = _log_tail(Path(broker.log), LOG_TAIL_LINES // 2)
            details += [f"last lines of {broker.log}:", *tail] if tail else []
    return details


def _broker_rows(state: ClusterState) -> list[list[str]]:
    """``rlog cluster up``'s table, as ``rpk container start`` prints it: the brokers."""
    return [[str(b.id), b.state, b.address] for b in state.brokers]


PROCESS_COLUMNS = [
    "NAME", "ROLE", "ADDRESS", "PID", "STATE", "CPU%", "RSS", "UPTIME", "RESTARTS", "ANSWERS"
]  # fmt: skip


def _process_rows(state: ClusterState, answers: Sequence[bool]) -> list[list[str]]:
    """``rlog cluster status``'s table: the controller, then each broker."""
    return [
        [
            p.name,
            p.role,
            p.address,
            str(p.pid) if p.pid else "-",
            p.state,
            f"{p.cpu_percent:.0f}" if p.cpu_percent is not None else "-",
            megabytes(p.rss_bytes),
            short_duration(p.uptime_s),
            str(p.restarts),
            "yes" if answers[i] else "no",
        ]
        for i, p in enumerate(state.processes)
    ]


def _process_json(process: BrokerState, answers: bool) -> dict[str, object]:
    return {
        "id": process.id,
        "name": process.name,
        "role": process.role,
        "state": process.state,
        "pid": process.pid,
        "address": process.address,
        "restarts": process.restarts,
        "cpu_percent": process.cpu_percent,
        "rss_bytes": process.rss_bytes,
        "uptime_s": process.uptime_s,
        "answers": answers,
    }


def _print_ready(terminal: Terminal, state: ClusterState, data_dir: Path, json_out: bool) -> None:
    bootstrap = bootstrap_of(state)
    if json_out:
        terminal.json(
            {
                "data_dir": str(data_dir),
                "rlogd_pid": state.pid,
                "cluster_id": state.cluster_id,
                "bootstrap": bootstrap,
                "controller": state.controller.address if state.controller else None,
                "brokers": [
                    {"id": b.id, "name": b.name, "state": b.state, "address": b.address}
                    for b in state.brokers
                ],
                "client_tls": _client_settings(state.client_tls, data_dir)
                if state.client_tls
                else None,
            }
        )
        return
    terminal.table(["NODE-ID", "STATUS", "KAFKA-ADDRESS"], _broker_rows(state), colors=STATE_COLORS)
    terminal.line()
    terminal.line("Set RLOG_BOOTSTRAP to use it from other shells:")
    terminal.line()
    terminal.line(f"  export RLOG_BOOTSTRAP={bootstrap}")
    if state.client_tls:
        terminal.line()
        terminal.line("Its listeners speak TLS. Kafka clients connect with (librdkafka names):")
        terminal.line()
        for key, value in _client_settings(state.client_tls, data_dir).items():
            terminal.line(f"  {key}={value}")


def _client_settings(tls: dict[str, str], data_dir: Path) -> dict[str, str]:
    """The TLS settings to print: the demo CA's client certificate where the brokers' own
    (what rlog's tools use) would be, so users do not copy the brokers' key around."""
    from rlog.cli.certificates import demo_files

    demo = demo_files(data_dir / "tls") if (data_dir / "tls" / "client.pem").exists() else None
    if demo is None or tls.get("ssl.certificate.location") != str(demo.broker):
        return tls
    return tls | {
        "ssl.certificate.location": str(demo.client),
        "ssl.key.location": str(demo.client),
    }


def _spawn_rlogd(data_dir: Path, plan: LaunchPlan) -> subprocess.Popen[bytes]:
    command = [
        sys.executable,
        "-m",
        "rlog.daemon.rlogd",
        "--brokers",
        str(plan.brokers),
        "--data-dir",
        str(data_dir),
        "--base-port",
        str(plan.base_port),
    ]
    command += ["--config", str(plan.config)]
    with open(rlogd_log_path(data_dir), "ab") as log:
        log.write(f"--- rlog cluster up: {' '.join(command)}\n".encode())
        log.flush()
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # survives this shell; its own process group for `down`
            close_fds=True,
        )


def _wait_ready(
    process: subprocess.Popen[bytes], data_dir: Path, plan: LaunchPlan, timeout_s: float
) -> ClusterState:
    deadline = time.monotonic() + timeout_s
    seen: ClusterState | None = None
    while True:
        code = process.poll()
        if code is not None:
            raise CliError(
                f"rlogd exited with code {code} while starting",
                ExitCode.FAILURE,
                details=_failure_details(data_dir, seen),
            )
        state = running_cluster(data_dir)
        seen = state or seen
        given_up = [p.name for p in state.processes if p.state in GAVE_UP] if state else []
        if given_up:  # rlogd will not restart them (restart policy): no point waiting
            details = _failure_details(data_dir, state)
            _terminate_group(process.pid)
            raise CliError(
                f"{', '.join(given_up)} could not start, so rlogd (pid {process.pid}) was stopped",
                ExitCode.FAILURE,
                details=details,
            )
        if _ready(state, process.pid, plan):
            assert state is not None
            return state
        if time.monotonic() >= deadline:
            details = _failure_details(data_dir, seen)
            _terminate_group(process.pid)
            raise CliError(
                f"the cluster did not answer within {timeout_s:g} s, so rlogd (pid "
                f"{process.pid}) was stopped",
                ExitCode.TIMEOUT,
                details=details,
            )
        time.sleep(0.1)


def _ready(state: ClusterState | None, pid: int, plan: LaunchPlan) -> bool:
    """Every process runs and answers, and every broker has registered with the controller."""
    return (
        state is not None
        and state.pid == pid
        and state.controller is not None
        and len(state.brokers) == plan.brokers
        and all(p.state == "running" for p in state.processes)
        and all(
            broker_answers(p.host, p.port, timeout_s=0.5, tls=state.tls_for(p))
            for p in state.processes
        )
        and registered_brokers(state.brokers[0], tls=state.tls_for(state.brokers[0]))
        == sorted(b.id or 0 for b in state.brokers)
    )


def registered_brokers(
    broker: BrokerState, timeout_s: float = 2.0, tls: ssl.SSLContext | None = None
) -> list[int] | None:
    """The broker ids this broker's Metadata lists (those registered with the controller)."""
    request = {
        "topics": [],
        "allow_auto_topic_creation": False,
        "include_cluster_authorized_operations": False,
        "include_topic_authorized_operations": False,
    }
    try:
        with BlockingKafkaClient(broker.host, broker.port, timeout_s=timeout_s, tls=tls) as client:
            body = client.request(ApiKey.METADATA, 8, request)
    except WireError:
        return None
    return sorted(b["node_id"] for b in body["brokers"])


def _terminate_group(pid: int) -> None:
    """Stop a process group we created ourselves (SIGTERM, then SIGKILL)."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except OSError:
        return
    try:
        psutil.Process(pid).wait(timeout=STOP_GRACE_S)
    except psutil.TimeoutExpired:
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            return
    except psutil.Error:
        return


@app.command(no_args_is_help=False)
def up(
    ctx: typer.Context,
    brokers: Annotated[
        int | None,
        typer.Option(
            "--brokers",
            "-n",
            min=1,
            max=64,
            help="Number of brokers [default: as last started in this data dir, else 1]",
            show_default=False,
        ),
    ] = None,
    base_port: Annotated[
        int | None,
        typer.Option(
            "--base-port",
            min=1,
            max=65535,
            help="Port of broker-1; broker-i listens on BASE+i-1 "
            f"[default: as last started, else {DEFAULT_BASE_PORT}]",
            show_default=False,
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            exists=True,
            dir_okay=False,
            resolve_path=True,
            help="rlog TOML config file, copied to DATA_DIR/rlog.toml (which the cluster uses "
            "and rlog config set edits) [default: that copy, as last started]",
            show_default=False,
        ),
    ] = None,
    wait: Annotated[
        float,
        typer.Option("--wait", min=1.0, help="Seconds to wait for every broker to answer"),
    ] = 30.0,
    tls: Annotated[
        bool,
        typer.Option(
            "--tls",
            help="Every listener speaks TLS, with certificates from a local CA made in "
            "DATA_DIR/tls (clients present one too); prints the client settings. Kept in "
            "DATA_DIR/rlog.toml for later starts",
        ),
    ] = False,
    data_dir: DataDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """Start a local cluster (rlogd in the background) and wait until every broker answers."""
    settings = settings_of(ctx).override(data_dir=data_dir)
    terminal = settings.terminal
    data_dir = settings.data_dir.resolve()
    running = running_cluster(data_dir)
    if running is not None:
        _already_up(terminal, running, data_dir, brokers, base_port, config, json_out)
        return
    data_dir.mkdir(parents=True, exist_ok=True)
    plan = _plan(data_dir, brokers, base_port, _cluster_config(terminal, data_dir, config))
    if tls:
        _configure_tls(data_dir, plan.config)
    _check_ports_free(plan)
    terminal.note(
        f"Starting a controller and {plan.brokers} broker(s) in {data_dir} "
        f"(log: {rlogd_log_path(data_dir)})..."
    )
    process = _spawn_rlogd(data_dir, plan)
    state = _wait_ready(process, data_dir, plan, wait)
    _print_ready(terminal, state, data_dir, json_out)


# What --tls writes into the cluster's config: its one listener per broker becomes SSL (and the
# controller's), with the demo CA's files, and clients must present certificates.
TLS_PROTOCOL_MAP = "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"


def _configure_tls(data_dir: Path, config: Path) -> None:
    """Make (once) the demo CA and certificates in DATA_DIR/tls and set the cluster's config to
    use them; refuse a config that names its own listeners (it should set SSL there itself)."""
    from rlog.cli.certificates import demo_files
    from rlog.daemon.config import ConfigError, parse_config
    from rlog.daemon.config_reload import set_key

    text = config.read_text()
    try:
        current = parse_config(text, str(config)).broker
    except ConfigError as error:
        raise CliError(str(error), ExitCode.CONFIG) from None
    if current.listeners:
        raise CliError(
            f"--tls makes each broker's one listener SSL, but {config} sets listeners; "
            "map an SSL listener there instead (rlog.toml(5))",
            ExitCode.USAGE,
        )
    files = demo_files(data_dir / "tls")
    for key, value in (  # in an order where each step leaves a valid config
        ("ssl.keystore.location", str(files.broker)),
        ("ssl.truststore.location", str(files.ca)),
        ("ssl.client.auth", "required"),
        ("listener.security.protocol.map", TLS_PROTOCOL_MAP + ",CONTROLLER:SSL"),
        ("inter.broker.listener.name", "SSL"),
    ):
        text = set_key(text, key, value)
    config.write_text(text)


def _check_ports_free(plan: LaunchPlan) -> None:
    from rlog.daemon.config import ConfigError, load_config

    ports = {plan.base_port + i: f"broker-{i + 1}" for i in range(plan.brokers)}
    try:
        controller_port = load_config(plan.config).cluster.controller_port
    except ConfigError:
        controller_port = 0  # rlogd reports the config error itself
    ports.setdefault(controller_port or plan.base_port + plan.brokers, "the controller")
    for port, owner in ports.items():
        if _port_in_use(port):
            raise CliError(
                f"port {port} ({owner}) is already in use; choose another --base-port",
                ExitCode.FAILURE,
            )


def _already_up(
    terminal: Terminal,
    state: ClusterState,
    data_dir: Path,
    brokers: int | None,
    base_port: int | None,
    config: Path | None,
    json_out: bool,
) -> None:
    first_port = min(b.port for b in state.brokers) if state.brokers else None
    if (brokers is not None and brokers != len(state.brokers)) or (
        base_port is not None and base_port != first_port
    ):
        raise CliError(
            f"a cluster of {len(state.brokers)} broker(s) on base port {first_port} is already "
            f"running in {data_dir}; stop it first with: rlog cluster down --data-dir {data_dir}",
            ExitCode.FAILURE,
        )
    if config is not None and not _same_contents(config, state.config):
        running_with = f"the config {state.config}" if state.config else "no config file"
        raise CliError(
            f"the cluster in {data_dir} is already running with {running_with}; change it with "
            f"rlog config set, or stop the cluster first to start it with {config}",
            ExitCode.FAILURE,
        )
    terminal.note(f"The cluster in {data_dir} is already running (rlogd pid {state.pid}).")
    _print_ready(terminal, state, data_dir, json_out)


def _same_contents(given: Path, running: str | None) -> bool:
    try:
        return running is not None and given.read_bytes() == Path(running).read_bytes()
    except OSError:
        return False


@app.command()
def status(
    ctx: typer.Context, data_dir: DataDirOption = None, json_out: JsonOption = False
) -> None:
    """Show the controller and each broker: role, address, pid, state, restarts, and whether it
    answers. Exits 8 when one does not answer."""
    settings = settings_of(ctx).override(data_dir=data_dir)
    data_dir = settings.data_dir
    state = running_cluster(data_dir)
    if state is None:
        raise not_running_error(data_dir)
    processes = state.processes
    answers = [
        broker_answers(p.host, p.port, timeout_s=min(settings.timeout_s, 2.0), tls=state.tls_for(p))
        for p in processes
    ]
    terminal = settings.terminal
    if json_out:
        rows = [_process_json(p, answers[i]) for i, p in enumerate(processes)]
        terminal.json(
            {
                "data_dir": str(data_dir),
                "rlogd_pid": state.pid,
                "cluster_id": state.cluster_id,
                "started_at_ms": state.started_at_ms,
                "config": state.config,
                "bootstrap": bootstrap_of(state),
                "controller": rows[0] if state.controller else None,
                "brokers": rows[1:] if state.controller else rows,
            }
        )
    else:
        terminal.line(
            f"rlogd pid {state.pid}, cluster id {state.cluster_id or '-'}, data dir {data_dir}"
        )
        terminal.table(
            PROCESS_COLUMNS,
            _process_rows(state, answers),
            colors=STATE_COLORS,
        )
    if not all(answers):
        raise typer.Exit(int(ExitCode.DEGRADED))


@app.command()
def disks(
    ctx: typer.Context,
    topic: Annotated[
        list[str] | None,
        typer.Option(
            "--topic",
            "-t",
            metavar="TOPIC",
            help="Only this topic's replicas (repeat for more); an unknown topic is an error.",
            show_default=False,
        ),
    ] = None,
    broker: Annotated[
        list[int] | None,
        typer.Option(
            "--broker",
            metavar="ID",
            help="Only this broker (repeat for more); one the cluster does not have is an error.",
            show_default=False,
        ),
    ] = None,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
    json_out: JsonOption = False,
) -> None:
    """Show each broker's log dir: where it is, the total and usable bytes of its volume, the
    bytes its logs take, and each partition replica's size and offset lag (as kafka-log-dirs
    reports them; the lag is how far the replica's log end is below its own high watermark,
    "-" for a log the broker keeps but no longer serves). Exits 8 when a broker does not
    answer or its log dir is offline."""
    settings = settings_of(ctx).override(bootstrap=bootstrap, data_dir=data_dir)
    found = disk_views.describe_disks(settings, topic or None, broker or None)
    terminal = settings.terminal
    if json_out:
        terminal.json({"brokers": [b.as_json() for b in found]})
    else:
        terminal.table(
            disk_views.SUMMARY_COLUMNS,
            disk_views.summary_rows(found),
            colors=disk_views.STATUS_COLORS,
        )
        rows = disk_views.partition_rows(found)
        if rows:
            terminal.line()
            terminal.table(disk_views.PARTITION_COLUMNS, rows)
    if not all(b.healthy for b in found):
        raise typer.Exit(int(ExitCode.DEGRADED))


def _stop(settings: Settings, data_dir: Path) -> bool:
    """Stop the data dir's rlogd; False when none was running."""
    state = running_cluster(data_dir)
    if state is None:
        return False
    terminal = settings.terminal
    pid = state.pid
    terminal.note(f"Stopping rlogd (pid {pid}) in {data_dir}...")
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    if _wait_gone(pid, STOP_GRACE_S):
        return True
    # Still there after the grace period: kill its process group, but only if the pid still is
    # the rlogd of this data dir (not a reused pid) and leads the group `cluster up` made for it.
    if is_rlogd_of(pid, data_dir):
        terminal.warn(f"rlogd (pid {pid}) did not stop within {STOP_GRACE_S:g} s; killing it")
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _wait_gone(pid, 5.0)
    for broker in state.processes:  # children orphaned by a killed rlogd
        if broker.pid and _is_broker_of(broker.pid, data_dir):
            with contextlib.suppress(ProcessLookupError):
                os.kill(broker.pid, signal.SIGKILL)
    status_path(data_dir).unlink(missing_ok=True)  # rlogd could not remove it itself
    return True


def _is_broker_of(pid: int, data_dir: Path) -> bool:
    try:
        argv = psutil.Process(pid).cmdline()
    except psutil.Error:
        return False
    target = str(data_dir.resolve())
    return any(target in arg for arg in argv)


def _wait_gone(pid: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.Error:
            return True
        time.sleep(0.05)
    return False


@app.command()
def down(ctx: typer.Context, data_dir: DataDirOption = None) -> None:
    """Stop the cluster: SIGTERM to rlogd, then SIGKILL after a grace period."""
    settings = settings_of(ctx).override(data_dir=data_dir)
    data_dir = settings.data_dir.resolve()
    if _stop(settings, data_dir):
        settings.terminal.note(f"Stopped the cluster in {data_dir}.")
    else:
        settings.terminal.note(f"The cluster in {data_dir} is not running; nothing to stop.")


def _confirm_purge(terminal: Terminal, data_dir: Path) -> None:
    """Ask on the terminal before deleting, as rpk does for destructive commands; without a
    terminal to ask on, refuse (a script must say --yes)."""
    if not sys.stdin.isatty():
        raise CliError(
            f"not deleting {data_dir} without a confirmation: stdin is not a terminal, so pass "
            "--yes to purge",
            ExitCode.USAGE,
        )
    stop = "stop the running cluster and " if running_cluster(data_dir) is not None else ""
    terminal.stderr.write(
        f"This will {stop}delete {data_dir} and everything in it: the brokers' logs (every "
        "topic's records), the metadata log, the event journal and the process logs.\n"
        "Delete it? [y/N] "
    )
    terminal.stderr.flush()
    if sys.stdin.readline().strip().lower() not in ("y", "yes"):
        terminal.note(f"Nothing removed; {data_dir} is as it was.")
        raise typer.Exit(int(ExitCode.FAILURE))


@app.command()
def purge(
    ctx: typer.Context,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Delete without asking (needed without a terminal).")
    ] = False,
    data_dir: DataDirOption = None,
) -> None:
    """Stop the cluster if it runs, then delete its data directory: the brokers' logs, the
    metadata log, the event journal and the process logs. Asks first on a terminal (y to
    delete); --yes skips the question, and without a terminal on stdin it is required."""
    settings = settings_of(ctx).override(data_dir=data_dir)
    data_dir = settings.data_dir.resolve()
    if not data_dir.exists():
        settings.terminal.note(f"{data_dir} does not exist; nothing to purge.")
        return
    looks_like_ours = launch_path(data_dir).exists() or rlogd_log_path(data_dir).exists()
    if not looks_like_ours and any(data_dir.iterdir()):
        raise CliError(
            f"{data_dir} does not look like an rlog data dir (no {LAUNCH_FILE}); not removing it",
            ExitCode.FAILURE,
        )
    if not yes:
        _confirm_purge(settings.terminal, data_dir)
    _stop(settings, data_dir)
    shutil.rmtree(data_dir)
    settings.terminal.note(f"Removed {data_dir}.")
