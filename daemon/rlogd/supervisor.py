"""Keeping each child alive: start it, see it listen, restart it per the restart policy (with
backoff) or park it, and stop it cleanly. What happens is journaled and shown in rlogd.json."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import json
import logging
import signal
import time
import uuid

from rlog.core.protocol.apis import ApiKey
from rlog.daemon.exit_codes import LOG_DIR_RECOVERED, ExitCode
from rlog.daemon.rlogd.cluster import Cluster
from rlog.daemon.rlogd.process import SupervisedProcess, describe_exit, signal_name
from rlog.daemon.rlogd.stats import ProcessStats
from rlog.daemon.wire import KafkaClient, WireError

log = logging.getLogger("rlogd")

# How long rlogd waits to hand the controller a notice before it restarts the broker anyway.
NOTICE_TIMEOUT_S = 1.0
# A process that stayed up this long has recovered: its next crash starts the backoff again.
HEALTHY_RUN_S = 10.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: if rlogd is killed -9, the kernel stops its children too."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _start_broker() -> None:
    """Runs in a broker before exec: as _die_with_parent, and SIGUSR1 (reread the chaos rules)
    blocked, so one sent while Python starts stays pending until the broker has its handler
    (daemon/broker/main.py unblocks it), instead of ending the process."""
    _die_with_parent()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})


def restart_wait_ms(
    backoff_ms: int, ran_s: float, *, requested: bool, base_ms: int, max_ms: int
) -> tuple[int, int]:
    """How long to wait before restarting a process that exited after `ran_s`, and the backoff
    its next exit starts from. A crash waits the backoff it has and doubles it (the base after
    the first crash, up to the max); a run of HEALTHY_RUN_S or more starts it again from no wait.
    A kill or terminate asked for on the control socket (rlog chaos, the TUI's keys, verify's
    nemesis) is not the process failing, so it is not a crash in a row: it waits at most the
    base and leaves the backoff as it was, however often it comes. Else a nemesis that kills
    the controller every few seconds has it wait out a 30 s backoff, which outlasts the run."""
    if ran_s >= HEALTHY_RUN_S:
        backoff_ms = 0
    if requested:
        return min(backoff_ms, base_ms), backoff_ms
    return backoff_ms, min(max(base_ms, backoff_ms * 2), max_ms)


class Supervisor:
    """Runs each child and keeps it running as the cluster's restart policy says."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    def start(self, child: SupervisedProcess) -> None:
        """Run the child, and keep it running, until rlogd stops."""
        child.supervisor = asyncio.create_task(self.supervise(child), name=child.name)

    def should_restart(self, code: int) -> bool:
        """The restart policy's verdict (rlog.toml(5)): "always" restarts whatever the exit,
        "on-failure" unless it was clean or a CONFIG exit (bad config, port in use); a
        LOG_DIR_RECOVERED exit always restarts."""
        if code == LOG_DIR_RECOVERED:
            return True
        policy = self.cluster.config.cluster.restart_policy
        clean = code in (ExitCode.OK, ExitCode.CONFIG)
        return policy == "always" or (policy == "on-failure" and not clean)

    async def supervise(self, child: SupervisedProcess) -> None:
        cluster = self.cluster
        while not cluster.stopping:
            code = await self._run_once(child)
            if cluster.stopping:
                break
            ran_s = time.monotonic() - child.started_at
            log.warning("%s exited with %s after %.1f s", child.name, describe_exit(code), ran_s)
            await self._tell_controller_exited(child)
            if child.restart_requested:  # a `restart` request: start it again now
                child.restart_requested = False
                child.restarts += 1
                continue
            if child.stay_down:  # `kill --stay-down`: down until a `restart` request
                await self._park(child, code)
                continue
            if code == LOG_DIR_RECOVERED:  # its disk works again: a new process
                child.restarts += 1  # recovers the log dir, whatever the policy
                continue
            if self.should_restart(code):
                await self._back_off(child, ran_s)
            else:
                await self._park(child, code)
        child.state = "stopped"

    async def stop(self, child: SupervisedProcess) -> int | None:
        """SIGTERM (SIGCONT too if paused), SIGKILL after shutdown_timeout_ms; the exit code."""
        process = child.process
        if process is None or process.returncode is not None:
            return None
        log.info("stopping %s (pid %d)", child.name, process.pid)
        paused = child.state == "paused"
        child.state = "stopping"
        self.cluster.write_status()
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
            if paused:
                process.send_signal(signal.SIGCONT)
        timeout_s = self.cluster.config.cluster.shutdown_timeout_ms / 1000
        try:
            return await asyncio.wait_for(process.wait(), timeout_s)
        except TimeoutError:
            log.error("%s did not stop within %.0f s; killing it", child.name, timeout_s)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            return await process.wait()

    async def stop_all(self) -> None:
        """Stop the brokers (in parallel), then the controller, then the supervisors."""
        cluster = self.cluster
        cluster.stopping = True
        for child in cluster.processes:
            child.wake.set()
        await asyncio.gather(*(self.stop(b) for b in cluster.brokers))
        if cluster.controller is not None:
            await self.stop(cluster.controller)
        for child in cluster.processes:
            if child.supervisor:
                child.supervisor.cancel()
        await asyncio.gather(
            *(c.supervisor for c in cluster.processes if c.supervisor), return_exceptions=True
        )
        # One a supervisor was spawning while the others stopped.
        await asyncio.gather(*(self.stop(b) for b in cluster.brokers))
        if cluster.controller is not None:
            await self.stop(cluster.controller)
        for child in cluster.processes:
            child.state = "stopped"
        cluster.write_status()

    # -- one run of the process ---------------------------------------------------------------
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

    async def _spawn(self, child: SupervisedProcess) -> None:
        child.data_dir.mkdir(parents=True, exist_ok=True)
        child.log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = child.argv
        if child.role == "broker":
            child.incarnation_id = str(uuid.uuid4())
            argv = [*argv, "--incarnation-id", child.incarnation_id]
        # The controller reads rlogd's notices (broker exits) on its stdin.
        stdin = (
            asyncio.subprocess.PIPE if child.role == "controller" else asyncio.subprocess.DEVNULL
        )
        with open(child.log_path, "ab") as output:
            child.process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=stdin,
                stdout=output,
                stderr=output,
                preexec_fn=_start_broker if child.role == "broker" else _die_with_parent,
            )
        child.state = "starting"
        child.listening = False
        child.by_request = False
        child.stay_down = False
        child.started_at = time.monotonic()
        child.started_at_ms = time.time_ns() // 1_000_000
        child.stats = ProcessStats.primed(child.process.pid)
        child.spawns += 1
        log.info("%s started, pid %d, port %d", child.name, child.process.pid, child.port)
        self._journal_start(child)
        self.cluster.write_status()

    async def _await_listening(self, child: SupervisedProcess) -> None:
        """Mark the process running once it answers ApiVersions on its port (not just accepts
        connections: another program squatting the port must not pass for it)."""
        process = child.process
        assert process is not None
        while process.returncode is None:
            client = KafkaClient(
                child.host, child.port, client_id="rlogd", tls=self.cluster.tls_for(child)
            )
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
            self.cluster.write_status()
            return

    # -- after an exit ------------------------------------------------------------------------
    async def _tell_controller_exited(self, child: SupervisedProcess) -> None:
        """A broker's process ended: tell the controller now, before it is restarted, so its
        leaderships move at once (not after broker.session.timeout.ms) and the new process may
        register at once. The heartbeat timeout stays the fallback if this is lost, and is all
        a controller on another host has."""
        if self.cluster.controller is None:
            return
        controller = self.cluster.controller.process
        if child.role != "broker" or child.incarnation_id is None or controller is None:
            return
        if controller.returncode is not None or controller.stdin is None:
            return
        notice = {
            "op": "broker_exited",
            "broker_id": child.node_id,
            "incarnation_id": child.incarnation_id,
        }
        try:
            controller.stdin.write(json.dumps(notice).encode() + b"\n")
            await asyncio.wait_for(controller.stdin.drain(), NOTICE_TIMEOUT_S)
        except (OSError, TimeoutError) as error:  # the controller is going away: it will see
            log.warning("could not tell the controller that %s exited: %r", child.name, error)

    async def _park(self, child: SupervisedProcess, code: int) -> None:
        """The policy does not restart it: record why, then wait for a `restart` request."""
        child.state = "stopped" if code in (ExitCode.OK, ExitCode.CONFIG) else "failed"
        if code == ExitCode.CONFIG:
            log.error("%s cannot start (see %s); not restarting", child.name, child.log_path)
        self.cluster.write_status()
        await child.wake.wait()
        child.wake.clear()
        if not self.cluster.stopping:
            child.restarts += 1

    async def _back_off(self, child: SupervisedProcess, ran_s: float) -> None:
        cluster = self.cluster.config.cluster
        wait_ms, child.backoff_ms = restart_wait_ms(
            child.backoff_ms,
            ran_s,
            requested=child.by_request,  # a kill or terminate asked for, not a crash
            base_ms=cluster.restart_backoff_ms,
            max_ms=cluster.restart_backoff_max_ms,
        )
        child.state = "restarting"
        child.restarts += 1
        self.cluster.write_status()
        with contextlib.suppress(TimeoutError):  # a `restart` request cuts the wait short
            await asyncio.wait_for(child.wake.wait(), wait_ms / 1000)
        child.wake.clear()

    # -- the event journal --------------------------------------------------------------------
    def _journal_start(self, child: SupervisedProcess) -> None:
        assert child.process is not None
        pid = child.process.pid
        fields = {"process": child.name, "role": child.role, "pid": pid, "port": child.port}
        journal = self.cluster.journal
        if child.spawns == 1:
            journal.record("process_started", f"{child.name} started (pid {pid})", **fields)
            return
        journal.record(
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
        why = " (rlogd stopping)" if self.cluster.stopping else why
        self.cluster.journal.record(
            "process_exited",
            f"{child.name} (pid {pid}) exited with {describe_exit(code)} after {ran_s:.1f} s{why}",
            process=child.name,
            role=child.role,
            pid=pid,
            returncode=code,
            code=code if code >= 0 else None,
            signal=signal_name(code),
            ran_s=round(ran_s, 3),
            by_request=child.by_request or child.restart_requested,
        )
