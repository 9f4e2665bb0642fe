"""Finding the cluster and reaching it.

The bootstrap address comes from, in order: ``--bootstrap`` on the command, ``--bootstrap``
before it, ``RLOG_BOOTSTRAP`` / ``RLOG_BROKERS``, and finally the data dir's ``rlogd.json``
(kept by a running rlogd). No address and no running rlogd is the "cluster not running" error,
naming the data dir and the command that starts it.

This module also builds confluent-kafka client configurations (so every Kafka client property
passes 1:1 through ``-X``) and turns client errors into one-line :class:`CliError`\\ s.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import socket
import ssl
import struct
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any

import psutil
import typer
from confluent_kafka import KafkaError, KafkaException

from rlog.cli.terminal import CliError, ExitCode, Terminal
from rlog.daemon import control
from rlog.daemon.data_dir import STATUS_FILE, status_path

ENV_BOOTSTRAP = ("RLOG_BOOTSTRAP", "RLOG_BROKERS")
ENV_DATA_DIR = "RLOG_DATA_DIR"


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/rlog``, or ``~/.local/share/rlog`` as the XDG spec defaults it."""
    data_home = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data_home) / "rlog"


@dataclass(frozen=True)
class Settings:
    """The global options, after flags and environment variables are merged."""

    terminal: Terminal
    bootstrap: str | None = None
    data_dir: Path = field(default_factory=default_data_dir)
    timeout_s: float = 10.0
    verbose: bool = False

    def override(self, bootstrap: str | None = None, data_dir: Path | None = None) -> Settings:
        """A command's own ``--bootstrap`` / ``--data-dir`` win over the global ones."""
        return replace(
            self,
            bootstrap=bootstrap if bootstrap else self.bootstrap,
            data_dir=data_dir if data_dir is not None else self.data_dir,
        )


def settings_of(ctx: typer.Context) -> Settings:
    settings = ctx.find_root().obj
    assert isinstance(settings, Settings), "the root callback sets ctx.obj"
    return settings


# The same options again on each command, so `rlog topic list --data-dir D` works as well as
# `rlog --data-dir D topic list`. No envvar here: the global option already read it, and an env
# value must not beat a global flag.
BootstrapOption = Annotated[
    str | None,
    typer.Option(
        "--bootstrap",
        "-b",
        help="Broker addresses host:port,... (as the global option; env RLOG_BOOTSTRAP).",
        show_default=False,
    ),
]
DataDirOption = Annotated[
    Path | None,
    typer.Option(
        "--data-dir",
        help="Cluster data directory (as the global option; env RLOG_DATA_DIR).",
        show_default=False,
        file_okay=False,
    ),
]


# -- the data dir's cluster state -------------------------------------------------------


@dataclass(frozen=True)
class BrokerState:
    """One process rlogd runs: a broker, or the controller (``role``; its ``id`` is None)."""

    id: int | None
    name: str
    host: str
    port: int
    pid: int | None
    state: str
    log: str | None = None  # the process's own log file, where rlogd sends its output
    role: str = "broker"
    restarts: int = 0
    cpu_percent: float | None = None  # rlogd's psutil sample, None when not running
    rss_bytes: int | None = None
    uptime_s: float | None = None
    tls: bool = False  # its listener for rlog's own tools speaks SSL

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


@dataclass(frozen=True)
class ClusterState:
    """The content of ``rlogd.json``."""

    pid: int
    brokers: tuple[BrokerState, ...]
    started_at_ms: int | None
    config: str | None
    controller: BrokerState | None = None
    cluster_id: str | None = None
    # The client properties rlog's own clients connect with, when its brokers speak SSL.
    client_tls: dict[str, str] | None = None

    def tls_for(self, process: BrokerState) -> ssl.SSLContext | None:
        """The TLS context to reach `process` with, or None: it speaks plaintext."""
        if not process.tls or not self.client_tls:
            return None
        return tls_context(self.client_tls)

    @property
    def processes(self) -> tuple[BrokerState, ...]:
        """The controller (when rlogd runs one), then the brokers."""
        return ((self.controller,) if self.controller else ()) + self.brokers


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object file, or None when it is missing or not (yet) a JSON object."""
    try:
        document = json.loads(path.read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError, UnicodeDecodeError):
        return None
    return document if isinstance(document, dict) else None


def _process_state(entry: dict[str, Any], role: str) -> BrokerState:
    node_id = int(entry["id"]) if entry.get("id") is not None else None
    return BrokerState(
        id=node_id,
        name=str(entry.get("name") or (f"broker-{node_id}" if node_id else role)),
        host=str(entry.get("host") or "127.0.0.1"),
        port=int(entry["port"]),
        pid=int(entry["pid"]) if entry.get("pid") is not None else None,
        state=str(entry.get("state") or "unknown"),
        log=str(entry["log"]) if entry.get("log") else None,
        role=str(entry.get("role") or role),
        restarts=int(entry.get("restarts") or 0),
        cpu_percent=_number(entry.get("cpu_percent")),
        rss_bytes=int(entry["rss_bytes"]) if entry.get("rss_bytes") is not None else None,
        uptime_s=_number(entry.get("uptime_s")),
        tls=bool(entry.get("tls")),
    )


def _string_map(value: object) -> dict[str, str] | None:
    if not isinstance(value, dict):
        return None
    return {str(key): str(item) for key, item in value.items()}


def tls_context(properties: dict[str, str]) -> ssl.SSLContext:
    """An `ssl` context from librdkafka's TLS properties (ssl.ca.location, ssl.certificate
    .location, ssl.key.location, ssl.key.password, ssl.endpoint.identification.algorithm)."""
    context = ssl.create_default_context(cafile=properties.get("ssl.ca.location"))
    certificate = properties.get("ssl.certificate.location")
    if certificate:
        context.load_cert_chain(
            certificate,
            properties.get("ssl.key.location") or None,
            properties.get("ssl.key.password") or None,
        )
    if properties.get("ssl.endpoint.identification.algorithm", "https") == "none":
        context.check_hostname = False
    return context


def wire_tls(settings: Settings) -> ssl.SSLContext | None:
    """TLS for the CLI's own wire client to the data dir's cluster, if it speaks TLS."""
    properties = cluster_client_tls(settings, settings.bootstrap)
    return tls_context(properties) if properties else None


def cluster_client_tls(settings: Settings, bootstrap: str | None) -> dict[str, str]:
    """The TLS client properties of the cluster running in the data dir (none: it speaks
    plaintext), when `bootstrap` is that cluster's (unset, or only its brokers' addresses:
    RLOG_BOOTSTRAP as `rlog cluster up` printed it)."""
    state = running_cluster(settings.data_dir)
    if state is None or not state.client_tls:
        return {}
    if bootstrap:
        ours = {b.address for b in state.brokers}
        if not {a.strip() for a in bootstrap.split(",") if a.strip()} <= ours:
            return {}
    return dict(state.client_tls)


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def read_cluster_state(data_dir: Path) -> ClusterState | None:
    document = read_json(status_path(data_dir))
    if document is None:
        return None
    try:
        brokers = tuple(_process_state(b, "broker") for b in document.get("brokers", []))
        if any(b.id is None for b in brokers):
            return None
        controller = document.get("controller")
        return ClusterState(
            pid=int(document["pid"]),
            brokers=brokers,
            started_at_ms=document.get("started_at_ms"),
            config=document.get("config"),
            controller=_process_state(controller, "controller") if controller else None,
            cluster_id=document.get("cluster_id"),
            client_tls=_string_map(document.get("client_tls")),
        )
    except (KeyError, TypeError, ValueError, AttributeError):
        return None


def bootstrap_of(state: ClusterState) -> str:
    """The bootstrap list of a cluster started from a data dir: every broker, so a client
    still finds the cluster while some brokers are down."""
    return ",".join(b.address for b in sorted(state.brokers, key=lambda b: b.id or 0))


def process_alive(pid: int) -> bool:
    """True for a live process; a zombie (exited, not yet reaped) counts as gone."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def is_rlogd_of(pid: int, data_dir: Path) -> bool:
    """Whether ``pid`` is an rlogd serving ``data_dir`` (and not a reused pid)."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        argv = process.cmdline()
        cwd = process.cwd()
    except psutil.Error:
        return False
    if not any("rlogd" in arg for arg in argv):
        return False
    for i, arg in enumerate(argv):
        value = None
        if arg == "--data-dir" and i + 1 < len(argv):
            value = argv[i + 1]
        elif arg.startswith("--data-dir="):
            value = arg.split("=", 1)[1]
        if value is not None:
            return (Path(cwd) / value).resolve() == data_dir.resolve()
    return False


def running_cluster(data_dir: Path) -> ClusterState | None:
    """The cluster state when an rlogd for this data dir is alive, else None (stale file)."""
    state = read_cluster_state(data_dir)
    if state is None or not is_rlogd_of(state.pid, data_dir):
        return None
    return state


def not_running_error(data_dir: Path) -> CliError:
    return CliError(
        f"rlog cluster is not running in {data_dir} (no live {STATUS_FILE}); "
        f"start it with: rlog cluster up --data-dir {data_dir}",
        ExitCode.NOT_RUNNING,
    )


def resolve_bootstrap(settings: Settings) -> str:
    """The bootstrap list to give Kafka clients, or the "not running" error."""
    if settings.bootstrap:
        return settings.bootstrap
    state = running_cluster(settings.data_dir)
    if state is None or not state.brokers:
        raise not_running_error(settings.data_dir)
    return bootstrap_of(state)


# -- rlogd's control socket -------------------------------------------------------------


def control_request(
    settings: Settings, document: dict[str, Any], timeout_s: float | None = None
) -> dict[str, Any]:
    """Ask the running rlogd of the data dir (its control socket); the reply, ``ok`` or not.

    "Not running" when no live rlogd serves the data dir or nothing answers on its socket.
    """
    data_dir = settings.data_dir
    if running_cluster(data_dir) is None:
        raise not_running_error(data_dir)
    wait_s = settings.timeout_s if timeout_s is None else timeout_s
    try:
        return control.request(data_dir, document, wait_s)
    except control.ControlUnavailable as error:
        raise CliError(
            f"rlogd in {data_dir} does not answer on its control socket ({error})",
            ExitCode.NOT_RUNNING,
        ) from None
    except TimeoutError:
        raise CliError(
            f"rlogd in {data_dir} did not answer within {wait_s:g} s", ExitCode.TIMEOUT
        ) from None
    except OSError as error:
        raise CliError(
            f"cannot talk to rlogd in {data_dir}: {error.strerror or error}", ExitCode.FAILURE
        ) from None


# -- is anyone listening? ---------------------------------------------------------------


def split_address(address: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``PLAINTEXT://host:port`` into (host, port)."""
    text = address.strip()
    if "://" in text:
        text = text.split("://", 1)[1]
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise CliError(f"bad broker address {address!r} (expected host:port)", ExitCode.USAGE)
    return host.strip("[]") or "127.0.0.1", int(port)


def tcp_reachable(host: str, port: int, timeout_s: float) -> str | None:
    """None when a TCP connection opens, else the reason it did not."""
    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            return None
    except OSError as exc:
        return exc.strerror or str(exc) or type(exc).__name__


def check_reachable(bootstrap: str, timeout_s: float) -> None:
    """Fail fast (one line) when no bootstrap broker accepts a connection.

    librdkafka would otherwise retry quietly until its own timeouts (minutes for a produce).
    """
    reasons = []
    for address in bootstrap.split(","):
        if not address.strip():
            continue
        host, port = split_address(address)
        reason = tcp_reachable(host, port, min(timeout_s, 3.0))
        if reason is None:
            return
        reasons.append(f"{host}:{port}: {reason}")
    raise CliError(
        f"cannot reach any broker at {bootstrap} ({'; '.join(reasons)})", ExitCode.UNREACHABLE
    )


_API_VERSIONS_KEY = 18


def broker_answers(
    host: str, port: int, timeout_s: float = 1.0, tls: ssl.SSLContext | None = None
) -> bool:
    """Whether a Kafka broker answers an ApiVersions v0 request with error code 0 (over TLS
    with `tls`).

    Hand-encoded (request header v1, empty body) so readiness checks need no client.
    """
    correlation_id = 0x724C4F47  # "rLOG"
    client_id = b"rlog-cli"
    body = struct.pack(">hhih", _API_VERSIONS_KEY, 0, correlation_id, len(client_id)) + client_id
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
        with contextlib.closing(sock):
            if tls is not None:  # the TLS socket takes over the descriptor, and closes it
                sock = tls.wrap_socket(sock, server_hostname=host)
            with contextlib.closing(sock):
                sock.settimeout(timeout_s)
                sock.sendall(struct.pack(">i", len(body)) + body)
                head = _recv_exactly(sock, 10)  # size, correlation id, error code
    except OSError:  # ssl.SSLError too: a refused certificate is no answer
        return False
    if head is None:
        return False
    _size, got_correlation, error_code = struct.unpack(">iih", head)
    return got_correlation == correlation_id and error_code == 0


def _recv_exactly(sock: socket.socket, count: int) -> bytes | None:
    data = b""
    while len(data) < count:
        chunk = sock.recv(count - len(data))
        if not chunk:
            return None
        data += chunk
    return data


# -- Kafka clients ----------------------------------------------------------------------


class _RecentLogs(logging.Handler):
    """Keeps librdkafka's last log lines, so an error can quote them instead of spilling
    librdkafka's own stderr chatter around our one-line message."""

    def __init__(self, keep: int = 20) -> None:
        super().__init__(logging.DEBUG)
        self.records: deque[str] = deque(maxlen=keep)

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record.getMessage())


_LIBRDKAFKA_LOG = _RecentLogs()


def _librdkafka_logger(verbose: bool) -> logging.Logger:
    logger = logging.getLogger("rlog.librdkafka")
    logger.propagate = False
    logger.setLevel(logging.DEBUG)
    if _LIBRDKAFKA_LOG not in logger.handlers:
        logger.addHandler(_LIBRDKAFKA_LOG)
    if verbose and not any(type(h) is logging.StreamHandler for h in logger.handlers):
        stream = logging.StreamHandler()
        stream.setFormatter(logging.Formatter("%% librdkafka: %(message)s"))
        logger.addHandler(stream)
    return logger


@dataclass
class ClientErrors:
    """Errors librdkafka reports through ``error_cb`` (connection loss and the like)."""

    seen: list[KafkaError] = field(default_factory=list)

    def __call__(self, error: KafkaError) -> None:
        self.seen.append(error)

    def fatal(self) -> KafkaError | None:
        return next((e for e in self.seen if e.fatal()), None)


def client_config(
    settings: Settings,
    bootstrap: str,
    properties: dict[str, str],
    *,
    role: str,
    on_error: Callable[[KafkaError], None] | None = None,
) -> dict[str, Any]:
    """A confluent-kafka config: our defaults first (with the TLS settings of the data dir's
    cluster when the bootstrap came from it), then the user's ``-X`` properties."""
    config: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": f"rlog-{role}",
        "logger": _librdkafka_logger(settings.verbose),
        "error_cb": on_error or ClientErrors(),
    }
    config.update(cluster_client_tls(settings, bootstrap))
    config.update(properties)
    return config


LIBRDKAFKA_PROPERTIES = "https://github.com/confluentinc/librdkafka/blob/master/CONFIGURATION.md"
_NO_SUCH_PROPERTY = re.compile(r'No such configuration property: "(?P<name>[^"]+)"')


def config_error(exc: BaseException, role: str, properties: dict[str, str]) -> CliError:
    """librdkafka refusing a client config, as one sentence naming the -X property at fault
    (librdkafka names it by its own alias at times: acks is request.required.acks)."""
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        reason = exc.args[0].str().strip()
    else:
        reason = str(exc).strip()
    unknown = _NO_SUCH_PROPERTY.search(reason)
    if unknown is not None:
        return CliError(
            f"-X {unknown['name']}: librdkafka has no {role} property of that name "
            f"(the properties it knows: {LIBRDKAFKA_PROPERTIES})",
            ExitCode.USAGE,
        )
    named = [f"{k}={v}" for k, v in properties.items() if k in reason] or [
        f"{k}={v}" for k, v in properties.items()
    ]
    flags = ", ".join(f"-X {pair}" for pair in named)
    at_fault = f"{flags}: " if flags else ""
    return CliError(f"{at_fault}librdkafka refuses this {role} setting: {reason}", ExitCode.USAGE)


_UNREACHABLE_CODES = {
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._RESOLVE,
}
_TIMEOUT_CODES = {KafkaError._TIMED_OUT, KafkaError._MSG_TIMED_OUT, KafkaError.REQUEST_TIMED_OUT}
_NOT_FOUND_CODES = {
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
}


def kafka_error(
    error: KafkaError | KafkaException | BaseException,
    *,
    bootstrap: str,
    action: str,
    topic: str | None = None,
) -> CliError:
    """A client error as one line with the right exit code."""
    if isinstance(error, KafkaException) and error.args and isinstance(error.args[0], KafkaError):
        error = error.args[0]
    if not isinstance(error, KafkaError):
        return CliError(f"{action} failed: {error}", ExitCode.FAILURE)
    code = error.code()
    reason = error.str()
    if code in _UNREACHABLE_CODES:
        return CliError(
            f"{action} failed: cannot reach the cluster at {bootstrap} ({reason})",
            ExitCode.UNREACHABLE,
        )
    if code in _TIMEOUT_CODES:
        return CliError(
            f"{action} failed: no answer from the cluster at {bootstrap} in time ({reason})",
            ExitCode.TIMEOUT,
        )
    if code in _NOT_FOUND_CODES and topic is not None:
        return CliError(f"unknown topic '{topic}'", ExitCode.NOT_FOUND)
    if code == KafkaError.TOPIC_ALREADY_EXISTS:
        return CliError(f"topic '{topic}' already exists", ExitCode.ALREADY_EXISTS)
    return CliError(f"{action} failed: {error.name()}: {reason}", ExitCode.FAILURE)


def topic_partitions(
    client: Any,
    topic: str,
    *,
    bootstrap: str,
    timeout_s: float,
) -> list[int]:
    """The topic's partition ids from a Metadata request, or a one-line error.

    A producer's Metadata request may auto-create the topic: the first answers then carry
    LEADER_NOT_AVAILABLE, so retry until partitions show up or the deadline passes.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = max(0.1, deadline - time.monotonic())
        try:
            metadata = client.list_topics(topic=topic, timeout=remaining)
        except KafkaException as exc:
            raise kafka_error(exc, bootstrap=bootstrap, action="metadata", topic=topic) from None
        found = metadata.topics.get(topic)
        error = found.error if found is not None else None
        retriable = error is not None and error.code() == KafkaError.LEADER_NOT_AVAILABLE
        if found is not None and error is None and found.partitions:
            return sorted(found.partitions)
        if not retriable and error is not None:
            raise kafka_error(error, bootstrap=bootstrap, action="metadata", topic=topic)
        if time.monotonic() >= deadline:
            if found is None:
                raise CliError(f"unknown topic '{topic}'", ExitCode.NOT_FOUND)
            raise CliError(
                f"topic '{topic}' has no available partitions after {timeout_s:g} s",
                ExitCode.TIMEOUT,
            )
        time.sleep(0.1)


def close_quietly(client: Any) -> None:
    with contextlib.suppress(Exception):
        client.close()
