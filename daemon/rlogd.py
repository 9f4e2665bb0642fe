"""rlogd: run a local rlog cluster in the foreground and keep its processes alive.

`rlogd --brokers N --data-dir DIR [--base-port P] [--config FILE]` starts the controller (on
127.0.0.1:P+N unless the config names its port, its metadata log in DIR/controller) and then
broker-1..broker-N (broker-i on 127.0.0.1:P+i-1, its logs in DIR/broker-i), each a subprocess
with its output in DIR/logs. It restarts a process that dies per the config's restart policy, and
on SIGTERM or SIGINT stops the brokers cleanly (each flushes its logs and writes its checkpoints)
and then the controller. The cluster's id is made once per data dir and kept in
DIR/meta.properties. While it runs, DIR/rlogd.json says where everything is and how each
process fares (pid, state, restarts, CPU %, resident memory, open file descriptors, uptime;
sampled every second), and the control socket DIR/rlogd.sock (JSON lines) answers status
requests and kills, terminates, pauses, resumes or restarts a process on request; `rlog` uses
both. Every process journals what happens to the cluster in DIR/events (rlogd: processes
started, exited, restarted; the controller: brokers fenced, leaders elected, ISRs shrunk or
expanded; brokers: replicas truncated), which `rlog events` reads.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import ctypes
import fcntl
import importlib.util
import json
import logging
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from rlog.core.protocol.apis import ApiKey
from rlog.daemon import config_reload
from rlog.daemon.chaos import FAULTS_FILE, ChaosError, ChaosRules
from rlog.daemon.config import ConfigError, RlogConfig, load_config, parse_config
from rlog.daemon.config_watch import ConfigWatcher
from rlog.daemon.control import ControlError, ControlServer, socket_path
from rlog.daemon.events import EventJournal, journal_path
from rlog.daemon.exit_codes import ExitCode
from rlog.daemon.wire import KafkaClient, WireError

log = logging.getLogger("rlogd")

HOST = "127.0.0.1"
STATUS_FILE = "rlogd.json"
LAUNCH_FILE = "cluster.json"
LOCK_FILE = "rlogd.lock"
META_FILE = "meta.properties"
CONTROLLER = "controller"
CONTROLLER_MODULE = "rlog.daemon.controller"
# A process that stayed up this long has recovered: its next crash starts the backoff again.
HEALTHY_RUN_S = 10.0
# How long the brokers wait for the controller to listen before they are started anyway
# (they retry reaching it themselves).
CONTROLLER_START_WAIT_S = 30.0
# How long a kill request waits to see the process gone before it answers.
KILL_WAIT_S = 10.0
# How often each process's CPU, memory and open files are sampled (and rlogd.json rewritten).
STATS_INTERVAL_S = 1.0
RELOAD_DEBOUNCE_S = 0.2  # an editor's save is a burst of events: reload once it is over
DYNAMIC_CONFIG_TIMEOUT_S = 15.0  # the controller may be restarting
RESOURCE_BROKER = 4  # IncrementalAlterConfigs: the broker resource ("" = cluster default)
_PR_SET_PDEATHSIG = 1
GAVE_UP = ("stopped", "failed")


def _die_with_parent() -> None:
    """Runs in the child before exec: if rlogd is killed -9, the kernel stops its children too."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class ProcessStats:
    """A process as psutil saw it at the last sample; None when unknown (not running, or not
    sampled yet)."""

    cpu_percent: float | None = None  # since the previous sample; may pass 100 (threads)
    rss_bytes: int | None = None
    open_files: int | None = None  # open file descriptors: files and sockets
    psutil_status: str | None = None  # running, sleeping, stopped (paused), zombie, ...
    handle: psutil.Process | None = field(default=None, repr=False)

    def fields(self) -> dict[str, Any]:
        return {
            "cpu_percent": self.cpu_percent,
            "rss_bytes": self.rss_bytes,
            "open_files": self.open_files,
            "psutil_status": self.psutil_status,
        }

    @classmethod
    def primed(cls, pid: int) -> ProcessStats:
        """Stats for a new process: psutil's CPU % counts from this first call."""
        with contextlib.suppress(psutil.Error):
            handle = psutil.Process(pid)
            handle.cpu_percent(None)
            return cls(handle=handle)
        return cls()

    def sample(self) -> None:
        handle = self.handle
        if handle is None:
            return
        try:
            with handle.oneshot():
                self.psutil_status = handle.status()
                self.cpu_percent = round(handle.cpu_percent(None), 1)
                self.rss_bytes = handle.memory_info().rss
                self.open_files = handle.num_fds()
        except psutil.ZombieProcess:
            self.psutil_status = psutil.STATUS_ZOMBIE
        except psutil.Error:  # gone (rlogd reaps it next) or not ours to look at
            self.psutil_status = None


@dataclass
class SupervisedProcess:
    """One child rlogd keeps alive: the controller or a broker."""

    name: str
    role: str  # "controller" or "broker"
    node_id: int | None
    port: int
    data_dir: Path
    log_path: Path
    argv: list[str]
    process: asyncio.subprocess.Process | None = None
    state: str = "starting"
    restarts: int = 0
    last_exit: int | None = None
    started_at: float = 0.0
    backoff_ms: int = 0
    listening: bool = False
    # Brought down by a control request: rlogd keeps running for a `restart` even if it stays down.
    by_request: bool = False
    restart_requested: bool = False
    spawns: int = 0  # times started by this rlogd: the first is a start, later ones restarts
    previous_pid: int | None = None
    started_at_ms: int | None = None  # wall clock, for the status
    stats: ProcessStats = field(default_factory=ProcessStats)
    supervisor: asyncio.Task[None] | None = field(default=None, repr=False)
    wake: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.alive and self.process else None

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None

    @property
    def parked(self) -> bool:
        """Down for good until a `restart` request (the restart policy gave up)."""
        return self.state in GAVE_UP and not self.alive

    @property
    def uptime_s(self) -> float | None:
        return round(time.monotonic() - self.started_at, 3) if self.alive else None

    def status(self) -> dict[str, Any]:
        stats = self.stats if self.alive else ProcessStats()
        return {
            "id": self.node_id,
            "name": self.name,
            "role": self.role,
            "host": HOST,
            "port": self.port,
            "pid": self.pid,
            "state": self.state,
            "restarts": self.restarts,
            "last_exit": self.last_exit,
            "data_dir": str(self.data_dir),
            "log": str(self.log_path),
            "started_at_ms": self.started_at_ms if self.alive else None,
            "uptime_s": self.uptime_s,
            **stats.fields(),
        }


def _controller_argv(
    port: int, data_dir: Path, cluster_id: str, config: Path | None, events: Path
) -> list[str]:
    argv = [sys.executable, "-m", CONTROLLER_MODULE, "--host", HOST, "--port", str(port)]
    argv += ["--data-dir", str(data_dir), "--cluster-id", cluster_id, "--events", str(events)]
    return argv + (["--config", str(config)] if config is not None else [])


def _broker_argv(
    broker_id: int,
    port: int,
    data_dir: Path,
    controller_port: int,
    cluster_id: str,
    config: Path | None,
    events: Path,
) -> list[str]:
    argv = [sys.executable, "-m", "rlog.daemon.broker", "--id", str(broker_id)]
    argv += ["--host", HOST, "--port", str(port), "--data-dir", str(data_dir)]
    argv += ["--controller", f"{HOST}:{controller_port}", "--cluster-id", cluster_id]
    argv += ["--events", str(events), "--faults", str(data_dir / FAULTS_FILE)]
    return argv + (["--config", str(config)] if config is not None else [])


class Supervisor:
    def __init__(
        self, data_dir: Path, config: RlogConfig, config_path: Path | None, cluster_id: str
    ) -> None:
        self.data_dir = data_dir
        self.config = config
        self.config_path = config_path
        self.cluster_id = cluster_id
        self.stopping = False
        self.started_at_ms = time.time_ns() // 1_000_000
        self.changed = asyncio.Event()
        self.journal = EventJournal(journal_path(data_dir, "rlogd"), "rlogd")
        cluster = config.cluster
        controller_port = cluster.resolved_controller_port
        controller_dir = data_dir / CONTROLLER
        self.controller = SupervisedProcess(
            name=CONTROLLER,
            role="controller",
            node_id=None,
            port=controller_port,
            data_dir=controller_dir,
            log_path=data_dir / "logs" / "controller.log",
            argv=_controller_argv(
                controller_port,
                controller_dir,
                cluster_id,
                config_path,
                journal_path(data_dir, CONTROLLER),
            ),
        )
        self.brokers = [
            SupervisedProcess(
                name=f"broker-{i}",
                role="broker",
                node_id=i,
                port=cluster.base_port + i - 1,
                data_dir=data_dir / f"broker-{i}",
                log_path=data_dir / "logs" / f"broker-{i}.log",
                argv=_broker_argv(
                    i,
                    cluster.base_port + i - 1,
                    data_dir / f"broker-{i}",
                    controller_port,
                    cluster_id,
                    config_path,
                    journal_path(data_dir, f"broker-{i}"),
                ),
            )
            for i in range(1, cluster.brokers + 1)
        ]
        self.chaos = ChaosRules({broker.name: broker.data_dir for broker in self.brokers})
        self.pending_restart: list[str] = []  # static keys edited since the start
        self._reload_lock = asyncio.Lock()
        self._reload_pending: asyncio.Future[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    @property
    def processes(self) -> list[SupervisedProcess]:
        return [self.controller, *self.brokers]

    # -- status file ----------------------------------------------------------------------
    def status_document(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "started_at_ms": self.started_at_ms,
            "config": str(self.config_path) if self.config_path else None,
            "cluster_id": self.cluster_id,
            "restart_policy": self.config.cluster.restart_policy,
            "control_socket": str(socket_path(self.data_dir)),
            "controller": self.controller.status(),
            "brokers": [b.status() for b in self.brokers],
        }

    def write_status(self) -> None:
        _write_json_atomically(self.data_dir / STATUS_FILE, self.status_document())
        self.changed.set()

    # -- one process ------------------------------------------------------------------------
    async def _spawn(self, child: SupervisedProcess) -> None:
        child.data_dir.mkdir(parents=True, exist_ok=True)
        child.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(child.log_path, "ab") as output:
            child.process = await asyncio.create_subprocess_exec(
                *child.argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                preexec_fn=_die_with_parent,
            )
        child.state = "starting"
        child.listening = False
        child.by_request = False
        child.started_at = time.monotonic()
        child.started_at_ms = time.time_ns() // 1_000_000
        child.stats = ProcessStats.primed(child.process.pid)
        child.spawns += 1
        log.info("%s started, pid %d, port %d", child.name, child.process.pid, child.port)
        self._journal_start(child)
        self.write_status()

    def _journal_start(self, child: SupervisedProcess) -> None:
        assert child.process is not None
        pid = child.process.pid
        fields = {"process": child.name, "role": child.role, "pid": pid, "port": child.port}
        if child.spawns == 1:
            self.journal.record("process_started", f"{child.name} started (pid {pid})", **fields)
            return
        self.journal.record(
            "process_restarted",
            f"{child.name} restarted (pid {pid}, was {child.previous_pid}; "
            f"restart {child.restarts})",
            previous_pid=child.previous_pid,
            restarts=child.restarts,
            **fields,
        )

    def _journal_exit(self, child: SupervisedProcess, pid: int, code: int) -> None:
        ran_s = time.monotonic() - child.started_at
        why = " (on request)" if child.by_request or child.restart_requested else ""
        why = " (rlogd stopping)" if self.stopping else why
        self.journal.record(
            "process_exited",
            f"{child.name} (pid {pid}) exited with {_describe_exit(code)} after {ran_s:.1f} s{why}",
            process=child.name,
            role=child.role,
            pid=pid,
            returncode=code,
            code=code if code >= 0 else None,
            signal=_signal_name(code),
            ran_s=round(ran_s, 3),
            by_request=child.by_request or child.restart_requested,
        )

    async def _await_listening(self, child: SupervisedProcess) -> None:
        """Mark the process running once it answers ApiVersions on its port (not just accepts
        connections: another program squatting the port must not pass for it)."""
        process = child.process
        assert process is not None
        while process.returncode is None:
            client = KafkaClient(HOST, child.port, client_id="rlogd")
            try:
                await client.request(ApiKey.API_VERSIONS, 0, {}, timeout_s=1.0)
            except WireError:
                await asyncio.sleep(0.05)
                continue
            finally:
                client.close()
            child.listening = True
            if child.state == "starting":
                child.state = "running"
            self.write_status()
            return

    async def _run_once(self, child: SupervisedProcess) -> int:
        """Start the process and wait for it to exit; its exit code."""
        await self._spawn(child)
        assert child.process is not None
        listening = asyncio.create_task(self._await_listening(child))
        code = await child.process.wait()
        listening.cancel()
        child.last_exit = code
        child.listening = False
        child.previous_pid = child.process.pid
        self._journal_exit(child, child.process.pid, code)
        return code

    def _should_restart(self, code: int) -> bool:
        """The restart policy's verdict (rlog.toml(5)): "always" restarts whatever the exit,
        "on-failure" unless it was clean or a CONFIG exit (bad config, port in use)."""
        policy = self.config.cluster.restart_policy
        clean = code in (ExitCode.OK, ExitCode.CONFIG)
        return policy == "always" or (policy == "on-failure" and not clean)

    async def _park(self, child: SupervisedProcess, code: int) -> None:
        """The policy does not restart it: record why, then wait for a `restart` request."""
        child.state = "stopped" if code in (ExitCode.OK, ExitCode.CONFIG) else "failed"
        if code == ExitCode.CONFIG:
            log.error("%s cannot start (see %s); not restarting", child.name, child.log_path)
        self.write_status()
        await child.wake.wait()
        child.wake.clear()
        if not self.stopping:
            child.restarts += 1

    async def _back_off(self, child: SupervisedProcess, ran_s: float) -> None:
        if ran_s >= HEALTHY_RUN_S:
            child.backoff_ms = 0
        child.state = "restarting"
        child.restarts += 1
        self.write_status()
        with contextlib.suppress(TimeoutError):  # a `restart` request cuts the wait short
            await asyncio.wait_for(child.wake.wait(), child.backoff_ms / 1000)
        child.wake.clear()
        cluster = self.config.cluster
        child.backoff_ms = min(
            max(cluster.restart_backoff_ms, child.backoff_ms * 2), cluster.restart_backoff_max_ms
        )

    async def supervise(self, child: SupervisedProcess) -> None:
        while not self.stopping:
            code = await self._run_once(child)
            if self.stopping:
                break
            ran_s = time.monotonic() - child.started_at
            log.warning("%s exited with %s after %.1f s", child.name, _describe_exit(code), ran_s)
            if child.restart_requested:  # a `restart` request: start it again now
                child.restart_requested = False
                child.restarts += 1
                continue
            if self._should_restart(code):
                await self._back_off(child, ran_s)
            else:
                await self._park(child, code)
        child.state = "stopped"

    def _start_supervising(self, child: SupervisedProcess) -> None:
        child.supervisor = asyncio.create_task(self.supervise(child), name=child.name)

    async def _stop_process(self, child: SupervisedProcess) -> int | None:
        """SIGTERM (SIGCONT too if paused), SIGKILL after shutdown_timeout_ms; the exit code."""
        process = child.process
        if process is None or process.returncode is not None:
            return None
        log.info("stopping %s (pid %d)", child.name, process.pid)
        paused = child.state == "paused"
        child.state = "stopping"
        self.write_status()
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
            if paused:
                process.send_signal(signal.SIGCONT)
        timeout_s = self.config.cluster.shutdown_timeout_ms / 1000
        try:
            return await asyncio.wait_for(process.wait(), timeout_s)
        except TimeoutError:
            log.error("%s did not stop within %.0f s; killing it", child.name, timeout_s)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            return await process.wait()

    # -- control requests ---------------------------------------------------------------------
    def _target(self, name: str) -> SupervisedProcess:
        for child in self.processes:
            if child.name == name:
                return child
        known = ", ".join(child.name for child in self.processes)
        raise ControlError(f"unknown target {name!r} (known: {known})", "unknown-target")

    async def control(self, op: str, target: str) -> dict[str, Any]:
        """Apply a control request (see rlog.daemon.control) to one process."""
        if self.stopping:
            raise ControlError("rlogd is shutting down")
        child = self._target(target)
        if op == "restart":
            message = await self._restart(child)
        else:
            message = await self._signal(child, op)
        self.write_status()
        return {"op": op, "target": child.name, "message": message, **child.status()}

    async def _signal(self, child: SupervisedProcess, op: str) -> str:
        process = child.process
        if process is None or process.returncode is not None:
            raise ControlError(f"{child.name} is not running (state {child.state})")
        pid = process.pid
        if op == "pause":
            if child.state == "paused":
                raise ControlError(f"{child.name} (pid {pid}) is already paused")
            process.send_signal(signal.SIGSTOP)
            child.state = "paused"
            message = f"paused {child.name} (pid {pid}) with SIGSTOP"
            self.journal.record("process_paused", message, process=child.name, pid=pid)
            return message
        if op == "resume":
            if child.state != "paused":
                raise ControlError(f"{child.name} (pid {pid}) is not paused")
            process.send_signal(signal.SIGCONT)
            child.state = "running" if child.listening else "starting"
            message = f"resumed {child.name} (pid {pid}) with SIGCONT"
            self.journal.record("process_resumed", message, process=child.name, pid=pid)
            return message
        if op == "kill":
            return await self._kill(child, process)
        return await self._terminate(child, process)

    async def _kill(self, child: SupervisedProcess, process: asyncio.subprocess.Process) -> str:
        child.by_request = True
        process.kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), KILL_WAIT_S)
        await asyncio.sleep(0)  # let the supervisor see the exit first
        policy = self.config.cluster.restart_policy
        after = "restarting it" if self._should_restart(-signal.SIGKILL) else "leaving it down"
        return (
            f"killed {child.name} (pid {process.pid}) with SIGKILL; "
            f"restart policy {policy}: {after}"
        )

    async def _terminate(
        self, child: SupervisedProcess, process: asyncio.subprocess.Process
    ) -> str:
        child.by_request = True
        code = await self._stop_process(child)
        await asyncio.sleep(0)
        policy = self.config.cluster.restart_policy
        exited = _describe_exit(code) if code is not None else "unknown status"
        after = "restarting it" if code is not None and self._should_restart(code) else "stopped"
        return (
            f"terminated {child.name} (pid {process.pid}) with SIGTERM: exited with {exited}; "
            f"restart policy {policy}: {after}"
        )

    async def _restart(self, child: SupervisedProcess) -> str:
        old_pid = child.pid
        if child.alive:
            child.restart_requested = True
            await self._stop_process(child)
        else:
            child.wake.set()  # parked or backing off: start it now
        deadline = time.monotonic() + KILL_WAIT_S
        while not (child.alive and child.pid != old_pid) and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
        if not child.alive:
            raise ControlError(f"{child.name} did not start again (state {child.state})")
        if old_pid is None:
            return f"started {child.name} (pid {child.pid})"
        return f"restarted {child.name} (pid {old_pid} -> {child.pid})"

    # -- network and disk chaos ---------------------------------------------------------------
    async def chaos_request(self, op: str, request: dict[str, Any]) -> dict[str, Any]:
        """partition / heal / delay / disk (see rlog.daemon.chaos): new rules to the brokers."""
        if self.stopping:
            raise ControlError("rlogd is shutting down")
        try:
            if op == "partition":
                names = request.get("targets")
                if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                    raise ChaosError("partition needs 'targets': a list of process names")
                clients = bool(request.get("clients", False))
                changed = self.chaos.partition(names, clients)
                message = "cut the links between " + ", ".join(names)
                if clients:
                    message += f", and clients off {names[0]}"
            elif op == "heal":
                changed = self.chaos.heal()
                message = "healed every link, delay and disk"
            elif op == "delay":
                target, delay_ms = request.get("target"), request.get("ms")
                if not isinstance(target, str) or not isinstance(delay_ms, int):
                    raise ChaosError("delay needs 'target' (broker-N) and 'ms' (an integer)")
                changed = self.chaos.delay(target, delay_ms)
                message = f"{target}: every request in and out waits {delay_ms} ms"
            else:
                target, state = request.get("target"), request.get("state")
                if not isinstance(target, str) or not isinstance(state, str):
                    raise ChaosError("disk needs 'target' (broker-N) and 'state' (stall|full|ok)")
                changed = self.chaos.disk(target, state)
                message = f"{target}: disk {state}"
        except ChaosError as error:
            reason = "unknown-target" if str(error).startswith("unknown process") else "bad-request"
            raise ControlError(str(error), reason) from None
        for name in changed:
            self.chaos.write(name)
            child = self._target(name)
            if child.alive and child.process is not None:
                child.process.send_signal(signal.SIGUSR1)  # reread the faults file
        faults = self.chaos.summary()
        self.journal.record("chaos", message, op=op, changed=changed, faults=faults)
        return {"op": op, "message": message, "changed": changed, "faults": faults}

    # -- config: hot reload and rlog config get|set -------------------------------------------
    def _background(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _watch_config(self) -> ConfigWatcher | None:
        """Reload on every edit of the config file (watchdog), debounced on the loop."""
        if self.config_path is None:
            return None
        loop = asyncio.get_running_loop()

        def edited() -> None:  # on watchdog's thread
            loop.call_soon_threadsafe(self._schedule_reload)

        watcher = ConfigWatcher(self.config_path, edited)
        try:
            watcher.start()
        except OSError as error:
            log.warning("not watching %s for edits: %s", self.config_path, error)
            return None
        return watcher

    def _schedule_reload(self) -> None:
        if self._reload_pending is not None and not self._reload_pending.done():
            self._reload_pending.cancel()  # editors write in bursts: reload once they stop
        self._reload_pending = asyncio.ensure_future(self._reload_after(RELOAD_DEBOUNCE_S))

    async def _reload_after(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        await self.reload_config()

    async def reload_config(self, text: str | None = None) -> dict[str, Any]:
        """Apply the config file (or `text`, about to be written to it) to the running cluster:
        dynamic keys through the controller, rlogd's own at once, static ones reported."""
        assert self.config_path is not None
        async with self._reload_lock:
            source = str(self.config_path)
            try:
                if text is None:
                    text = self.config_path.read_text()
                edited = parse_config(text, source)
            except (OSError, ConfigError) as error:
                message = f"config edit rejected, the running config stays: {error}"
                log.error("%s", message)
                self.journal.record("config_rejected", message, path=source)
                raise ControlError(message, "bad-request") from None
            change = config_reload.changes(self.config, edited)
            if change.dynamic:
                problem = await self._push_dynamic(dict(change.dynamic))
                if problem is not None:
                    message = f"config edit not applied: the controller refused it: {problem}"
                    self.journal.record("config_rejected", message, path=source)
                    raise ControlError(message)
            self.config = config_reload.applied(self.config, edited)
            self.pending_restart = sorted(set(self.pending_restart) | set(change.static))
            if not change.empty:
                message = f"config reloaded: {change.describe()}"
                log.info("%s", message)
                self.journal.record(
                    "config_reloaded",
                    message,
                    path=source,
                    dynamic=change.dynamic,
                    rlogd=change.rlogd,
                    needs_restart=change.static,
                )
            self.write_status()
            return {
                "message": change.describe(),
                "applied": change.dynamic,
                "rlogd": change.rlogd,
                "needs_restart": change.static,
            }

    async def _push_dynamic(self, configs: dict[str, str | None]) -> str | None:
        """Set (or with None remove) cluster-wide dynamic configs at the controller; the
        problem it reports, or None."""
        body = {
            "resources": [
                {
                    "resource_type": RESOURCE_BROKER,
                    "resource_name": "",
                    "configs": [
                        {"name": name, "config_operation": 0 if value is not None else 1,
                         "value": value}
                        for name, value in configs.items()
                    ],
                }
            ],
            "validate_only": False,
        }  # fmt: skip
        client = KafkaClient(HOST, self.controller.port, client_id="rlogd")
        deadline = time.monotonic() + DYNAMIC_CONFIG_TIMEOUT_S
        try:
            while True:
                try:
                    answer = await client.request(
                        ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, body, timeout_s=5.0
                    )
                    break
                except WireError as error:
                    if time.monotonic() >= deadline:
                        return f"the controller did not answer: {error}"
                    await asyncio.sleep(0.5)
        finally:
            client.close()
        (result,) = answer["responses"]
        if result["error_code"] != 0:
            return result.get("error_message") or f"error {result['error_code']}"
        return None

    async def _clear_stale_dynamic_configs(self) -> None:
        """Brokers read the file at start: drop dynamic defaults an earlier run pushed."""
        names = dict.fromkeys(config_reload.DYNAMIC_BROKER_KEYS.values())
        problem = await self._push_dynamic(names)
        if problem is not None:
            log.warning("could not clear earlier dynamic configs: %s", problem)

    async def config_request(self, op: str, request: dict[str, Any]) -> dict[str, Any]:
        """config: what is in force; config_set: edit one key in the file and apply it."""
        if op == "config":
            return {
                "path": str(self.config_path) if self.config_path else None,
                "config": config_reload.as_tables(self.config),
                "needs_restart": self.pending_restart,
            }
        if self.config_path is None:
            raise ControlError(
                "rlogd runs without a config file: start it with --config FILE to change "
                "settings live"
            )
        key, value = request.get("key"), request.get("value")
        if not isinstance(key, str) or not isinstance(value, str):
            raise ControlError("config_set needs 'key' and 'value' (strings)", "bad-request")
        try:
            text = config_reload.set_key(self.config_path.read_text(), key, value)
        except (OSError, ConfigError) as error:
            raise ControlError(f"not changed: {error}", "bad-request") from None
        reply = await self.reload_config(text)  # validated and applied before it is written
        temporary = self.config_path.with_name(self.config_path.name + ".rlog-tmp")
        temporary.write_text(text)
        os.replace(temporary, self.config_path)
        return {"key": key, "value": value, **reply}

    # -- whole cluster ------------------------------------------------------------------------
    def _brokers_gave_up(self) -> bool:
        """Every broker is down for good and none by request: nothing left to supervise."""
        return all(b.parked and not b.by_request for b in self.brokers)

    async def _start_controller(self) -> bool:
        """Start the controller and wait until it listens; False if it cannot start."""
        if not _runnable(CONTROLLER_MODULE):
            log.error("the controller (%s) is not installed; cannot start", CONTROLLER_MODULE)
            return False
        self._start_supervising(self.controller)
        deadline = time.monotonic() + CONTROLLER_START_WAIT_S
        while not self.stopping and time.monotonic() < deadline:
            if self.controller.state == "running":
                return True
            if self.controller.parked:
                log.error(
                    "the controller could not start (%s; see %s); not starting the brokers",
                    _describe_exit(self.controller.last_exit or 0),
                    self.controller.log_path,
                )
                return False
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), 0.2)
        if not self.stopping:
            log.warning("the controller does not listen yet; starting the brokers anyway")
        return True

    async def run(self) -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        control = ControlServer(socket_path(self.data_dir), self)
        await control.start()
        self.chaos.write_all()  # a new rlogd starts with every link healed
        self.write_status()
        self.journal.record(
            "rlogd_started",
            f"rlogd started (pid {os.getpid()}, {len(self.brokers)} brokers, "
            f"cluster {self.cluster_id})",
            pid=os.getpid(),
            brokers=len(self.brokers),
            cluster_id=self.cluster_id,
        )
        sampler = asyncio.create_task(self._sample_forever())
        try:
            return await self._run_until_stopped(stop)
        finally:
            sampler.cancel()
            await self.shutdown()
            await control.close()
            self.journal.record("rlogd_stopped", "rlogd stopped", pid=os.getpid())
            self.journal.close()

    async def _sample_forever(self) -> None:
        """Refresh each running process's psutil stats, and rlogd.json with them."""
        while True:
            await asyncio.sleep(STATS_INTERVAL_S)
            for child in self.processes:
                if child.alive:
                    child.stats.sample()
            self.write_status()

    async def _run_until_stopped(self, stop: asyncio.Event) -> int:
        stopping = asyncio.create_task(stop.wait())
        controller_up = asyncio.create_task(self._start_controller())
        await asyncio.wait({stopping, controller_up}, return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            controller_up.cancel()
            return ExitCode.OK
        if not controller_up.result():
            stopping.cancel()
            return ExitCode.FAILURE
        for broker in self.brokers:
            self._start_supervising(broker)
        self._background(self._clear_stale_dynamic_configs())
        watcher = self._watch_config()
        # Run until asked to stop, or until the policy gave up on every broker.
        while not stop.is_set() and not self._brokers_gave_up():
            self.changed.clear()
            changed = asyncio.create_task(self.changed.wait())
            await asyncio.wait({stopping, changed}, return_when=asyncio.FIRST_COMPLETED)
            changed.cancel()
        stopping.cancel()
        if watcher is not None:
            watcher.stop()
        if stop.is_set():
            return ExitCode.OK
        failed = any(b.state == "failed" or b.last_exit == ExitCode.CONFIG for b in self.brokers)
        return ExitCode.FAILURE if failed else ExitCode.OK

    async def shutdown(self) -> None:
        """Stop the brokers (in parallel), then the controller, then the supervisors."""
        self.stopping = True
        for child in self.processes:
            child.wake.set()
        await asyncio.gather(*(self._stop_process(b) for b in self.brokers))
        await self._stop_process(self.controller)
        for child in self.processes:
            if child.supervisor:
                child.supervisor.cancel()
        await asyncio.gather(
            *(c.supervisor for c in self.processes if c.supervisor), return_exceptions=True
        )
        # One a supervisor was spawning while the others stopped.
        await asyncio.gather(*(self._stop_process(b) for b in self.brokers))
        await self._stop_process(self.controller)
        for child in self.processes:
            child.state = "stopped"
        self.write_status()


def _runnable(module: str) -> bool:
    """Whether `python -m module` has something to run (a module, or a package's __main__)."""
    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{module}.__main__")
    except (ImportError, ValueError):
        return False
    return spec is not None


def _signal_name(code: int) -> str | None:
    """The signal that ended a process (a negative exit code), by name."""
    if code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
    return f"code {code}"


def _write_json_atomically(path: Path, document: dict[str, Any]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(document, indent=1) + "\n")
    os.replace(temporary, path)


def new_cluster_id() -> str:
    """Kafka's form: a random UUID, base64url without padding (22 characters). Like Kafka's
    Uuid.randomUuid, never one starting with "-", which a command line would take for a flag."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


def cluster_id_of(data_dir: Path) -> str:
    """The data dir's cluster id from DIR/meta.properties, made and written on first use."""
    path = data_dir / META_FILE
    with contextlib.suppress(FileNotFoundError):
        for line in path.read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "cluster.id" and value.strip():
                return value.strip()
    cluster_id = new_cluster_id()
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(f"version=1\ncluster.id={cluster_id}\n")
    os.replace(temporary, path)
    return cluster_id


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="rlogd", description="Run a local rlog cluster in the foreground."
    )
    parser.add_argument("--brokers", type=int, default=None, help="number of brokers (default 1)")
    parser.add_argument(
        "--data-dir", type=Path, required=True, help="where the cluster keeps its data"
    )
    parser.add_argument(
        "--base-port",
        type=int,
        default=None,
        help="broker-i listens on BASE_PORT+i-1, the controller on BASE_PORT+BROKERS unless "
        "the config sets controller_port (default 9092)",
    )
    parser.add_argument("--config", type=Path, default=None, help="rlog TOML config file")
    return parser.parse_args(argv)


def _settings(args: argparse.Namespace) -> RlogConfig:
    config = load_config(args.config)
    overrides: dict[str, Any] = {}
    if args.brokers is not None:
        overrides["brokers"] = args.brokers
    if args.base_port is not None:
        overrides["base_port"] = args.base_port
    if overrides:
        from dataclasses import replace

        cluster = replace(config.cluster, **overrides)
        if not 1 <= cluster.brokers <= 64:
            raise ConfigError(f"--brokers: {cluster.brokers} is not within 1..64")
        if not 1 <= cluster.base_port <= 65535 - cluster.brokers:
            raise ConfigError(f"--base-port: {cluster.base_port} is not a usable port")
        broker_ports = range(cluster.base_port, cluster.base_port + cluster.brokers)
        if cluster.controller_port in broker_ports:
            raise ConfigError(
                f"controller_port {cluster.controller_port} is one of the brokers' ports "
                f"({broker_ports.start}..{broker_ports.stop - 1})"
            )
        config = replace(config, cluster=cluster)
    return config


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s rlogd %(levelname)s: %(message)s")
    try:
        config = _settings(args)
    except ConfigError as error:
        print(f"rlogd: {error}", file=sys.stderr)
        sys.exit(ExitCode.CONFIG)
    data_dir: Path = args.data_dir.resolve()
    config_path = args.config.resolve() if args.config else None
    data_dir.mkdir(parents=True, exist_ok=True)
    # Held for rlogd's whole life; the kernel drops the lock when the process ends.
    lock = open(data_dir / LOCK_FILE, "w")  # noqa: SIM115
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"rlogd: another rlogd is already running for {data_dir}", file=sys.stderr)
        sys.exit(ExitCode.USAGE)
    cluster_id = cluster_id_of(data_dir)
    _write_json_atomically(
        data_dir / LAUNCH_FILE,
        {
            "brokers": config.cluster.brokers,
            "base_port": config.cluster.base_port,
            "controller_port": config.cluster.resolved_controller_port,
            "config": str(config_path) if config_path else None,
        },
    )
    code = asyncio.run(_serve(data_dir, config, config_path, cluster_id))
    log.info("rlogd stopped")
    sys.exit(code)


async def _serve(
    data_dir: Path, config: RlogConfig, config_path: Path | None, cluster_id: str
) -> int:
    supervisor = Supervisor(data_dir, config, config_path, cluster_id)
    try:
        return await supervisor.run()
    finally:
        with contextlib.suppress(FileNotFoundError):
            (data_dir / STATUS_FILE).unlink()


if __name__ == "__main__":
    main()
