"""rlogd's control API: a Unix socket in the data dir speaking one JSON object per line.

The socket is ``DATA_DIR/rlogd.sock``, mode 0600 (only the user running rlogd may steer it).
Each request line is a JSON object with an ``op``; each gets one reply line:

* ``{"op": "status"}`` -> ``{"ok": true, ...the rlogd.json document...}``: rlogd's pid and
  cluster id, then ``controller`` and ``brokers``, one object per process with ``name``,
  ``role``, ``id``, ``host``, ``port``, ``pid``, ``state``, ``restarts``, ``last_exit``,
  ``data_dir``, ``log``, ``started_at_ms``, ``uptime_s``, and psutil's view sampled every
  second: ``cpu_percent``, ``rss_bytes``, ``open_files`` (descriptors) and ``psutil_status``
  (running, sleeping, stopped, zombie, ...); each None while the process is not running.
* ``{"op": OP, "target": "broker-N" | "controller"}`` for OP in :data:`PROCESS_OPS` ->
  ``{"ok": true, "op": OP, "target": ..., "message": "one line", ...}``; a ``kill`` may add
  ``"stay_down": true`` (the process stays down whatever the restart policy, until a
  ``restart``)

Any failure is ``{"ok": false, "error": "one clear line", "reason": R}`` where R is one of
:data:`REASONS`. A bad request, an unknown op or target, or a bug in a handler is answered that
way and never ends rlogd.

The server side is :class:`ControlServer` (asyncio, in rlogd); :func:`request` is the blocking
client the CLI and the tests use.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Protocol

from rlog.daemon.data_dir import socket_path

log = logging.getLogger("rlogd.control")

# kill: SIGKILL, then the restart policy (or, with "stay_down", down until a restart);
# terminate: SIGTERM (a clean exit); pause/resume: SIGSTOP/SIGCONT; restart: stop (SIGTERM,
# SIGKILL after shutdown_timeout_ms) and start again.
PROCESS_OPS = ("kill", "terminate", "pause", "resume", "restart")
# Network and disk chaos (rlog.daemon.chaos): {"op": "partition", "targets": [...], "clients":
# bool}, {"op": "heal"}, {"op": "delay", "target": "broker-N", "ms": M}, {"op": "disk",
# "target": "broker-N", "state": "stall|full|ok"}, {"op": "lose-answers", "target": "broker-N",
# "count": N}; the reply has "message", "changed" (the brokers whose rules changed) and "faults"
# (every broker's rules now).
CHAOS_OPS = ("partition", "heal", "delay", "disk", "lose-answers")
# {"op": "config"}: the config in force ("config": {"cluster": {...}, "broker": {...}}, "path",
# "needs_restart"); {"op": "config_set", "key": K, "value": V}: K set in the config file and
# applied as an edit of the file would be ("applied", "rlogd", "needs_restart").
CONFIG_OPS = ("config", "config_set")
OPS = ("status", *PROCESS_OPS, *CHAOS_OPS, *CONFIG_OPS)
# Why a request failed: it was malformed or named an unknown op ("bad-request"), an unknown
# process ("unknown-target"), the process is not in a state the op applies to ("refused"), or
# rlogd itself failed ("internal").
REASONS = ("bad-request", "unknown-target", "refused", "internal")
# A request is one small JSON object; a longer line is refused rather than buffered.
MAX_LINE_BYTES = 64 * 1024
# sun_path holds 108 bytes with its NUL; longer paths are reached through /proc/self/fd.
_SUN_PATH_MAX = 100


class ControlError(Exception):
    """A request the control API refuses; the message is the one-line reply."""

    def __init__(self, message: str, reason: str = "refused") -> None:
        assert reason in REASONS, reason
        super().__init__(message)
        self.reason = reason


class Controlled(Protocol):
    """What the control server steers (rlogd's Supervisor)."""

    def status_document(self) -> dict[str, Any]: ...

    async def control(self, op: str, target: str, *, stay_down: bool = False) -> dict[str, Any]: ...

    async def chaos_request(self, op: str, request: dict[str, Any]) -> dict[str, Any]: ...

    async def config_request(self, op: str, request: dict[str, Any]) -> dict[str, Any]: ...


@contextlib.contextmanager
def _bindable(path: Path) -> Iterator[str]:
    """A name for ``path`` that fits in sun_path (via the directory's fd if it is too long)."""
    if len(os.fsencode(str(path))) < _SUN_PATH_MAX:
        yield str(path)
        return
    directory = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{directory}/{path.name}"
    finally:
        os.close(directory)


def _error(message: str, reason: str = "bad-request") -> dict[str, Any]:
    return {"ok": False, "error": message, "reason": reason}


async def handle_request(target: Controlled, line: bytes) -> dict[str, Any]:
    """One request line -> its reply; never raises."""
    try:
        request = json.loads(line)
    except (ValueError, UnicodeDecodeError):
        return _error("the request is not JSON (send one JSON object per line)")
    if not isinstance(request, dict):
        return _error("the request must be a JSON object with an 'op'")
    op = request.get("op")
    if op not in OPS:
        return _error(f"unknown op {op!r} (known: {', '.join(OPS)})")
    try:
        if op == "status":
            return {"ok": True, **target.status_document()}
        if op in CHAOS_OPS:
            return {"ok": True, **(await target.chaos_request(op, request))}
        if op in CONFIG_OPS:
            return {"ok": True, **(await target.config_request(op, request))}
        name = request.get("target")
        if not isinstance(name, str) or not name:
            return _error(f"op {op!r} needs a 'target' (broker-N or controller)")
        stay_down = request.get("stay_down", False)
        if not isinstance(stay_down, bool):
            return _error("'stay_down' must be true or false")
        if stay_down and op != "kill":
            return _error(f"'stay_down' applies to kill only, not to {op!r}")
        return {"ok": True, **(await target.control(op, name, stay_down=stay_down))}
    except ControlError as error:
        return _error(str(error), error.reason)
    except Exception as error:  # the API must never take rlogd down
        log.exception("control request %r failed", request)
        return _error(f"internal error in rlogd: {type(error).__name__}: {error}", "internal")


class ControlServer:
    """The listening socket; each connection may send many requests, answered in order."""

    def __init__(self, path: Path, target: Controlled) -> None:
        self.path = path
        self.target = target
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        # We hold the data dir's lock, so a socket file left here is a dead rlogd's.
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        previous_umask = os.umask(0o177)  # created 0600: no window where others may connect
        try:
            with _bindable(self.path) as name:
                listener.bind(name)
        except OSError:
            listener.close()
            raise
        finally:
            os.umask(previous_umask)
        os.chmod(self.path, 0o600)
        self._server = await asyncio.start_unix_server(
            self._serve, sock=listener, limit=MAX_LINE_BYTES
        )

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while True:
                try:
                    line = await reader.readline()
                except ValueError:  # longer than MAX_LINE_BYTES
                    reply = _error(f"request longer than {MAX_LINE_BYTES} bytes")
                    writer.write(json.dumps(reply).encode() + b"\n")
                    break
                if not line.strip():
                    if not line:
                        break
                    continue
                reply = await handle_request(self.target, line)
                writer.write(json.dumps(reply).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self._connections.discard(task)
            writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()


# -- the client -------------------------------------------------------------------------------


class ControlUnavailable(Exception):
    """Nobody answers on the socket: rlogd is not running (or not yet listening)."""


def request(data_dir: Path, document: dict[str, Any], timeout_s: float = 10.0) -> dict[str, Any]:
    """Send one request to the rlogd of ``data_dir`` and return its reply.

    ControlUnavailable when no rlogd listens there; TimeoutError when it does not answer in
    ``timeout_s``.
    """
    path = socket_path(data_dir)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(timeout_s)
        try:
            with _bindable(path) as name:
                client.connect(name)
        except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError) as error:
            raise ControlUnavailable(f"{path}: {error.strerror}") from None
        client.sendall(json.dumps(document).encode() + b"\n")
        reply = _read_line(client)
    try:
        answer = json.loads(reply)
    except ValueError:
        raise ControlUnavailable(f"{path}: rlogd answered something that is not JSON") from None
    if not isinstance(answer, dict):
        raise ControlUnavailable(f"{path}: rlogd answered something that is not a JSON object")
    return answer


def _read_line(client: socket.socket) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = client.recv(MAX_LINE_BYTES)
        if not chunk:
            if not data:
                raise ControlUnavailable("rlogd closed the control connection without answering")
            break
        data += chunk
    return data
