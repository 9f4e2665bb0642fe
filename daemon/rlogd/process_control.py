"""Control requests on one process (rlog chaos kill|terminate|pause|resume|restart): the
signal, the wait for its effect, and the one-line answer."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from typing import Any

from rlog.daemon.control import ControlError
from rlog.daemon.rlogd.cluster import Cluster
from rlog.daemon.rlogd.process import SupervisedProcess, describe_exit
from rlog.daemon.rlogd.supervisor import Supervisor

# How long a kill request waits to see the process gone before it answers.
KILL_WAIT_S = 10.0


class ProcessControl:
    """Answers the control socket's process ops for rlogd."""

    def __init__(self, cluster: Cluster, supervisor: Supervisor) -> None:
        self.cluster = cluster
        self.supervisor = supervisor

    async def apply(self, op: str, target: str, *, stay_down: bool = False) -> dict[str, Any]:
        """Apply a control request (see rlog.daemon.control) to one process; ``stay_down``
        (kill only) keeps it down whatever the restart policy, until a `restart`."""
        if self.cluster.stopping:
            raise ControlError("rlogd is shutting down")
        child = self.cluster.process(target)
        if op == "restart":
            message = await self._restart(child)
        elif op == "kill":
            message = await self._kill(child, self._running(child), stay_down)
        else:
            message = await self._signal(child, op)
        self.cluster.write_status()
        return {"op": op, "target": child.name, "message": message, **child.status()}

    @staticmethod
    def _running(child: SupervisedProcess) -> asyncio.subprocess.Process:
        process = child.process
        if process is None or process.returncode is not None:
            raise ControlError(f"{child.name} is not running (state {child.state})")
        return process

    async def _signal(self, child: SupervisedProcess, op: str) -> str:
        process = self._running(child)
        pid = process.pid
        journal = self.cluster.journal
        if op == "pause":
            if child.state == "paused":
                raise ControlError(f"{child.name} (pid {pid}) is already paused")
            process.send_signal(signal.SIGSTOP)
            child.state = "paused"
            message = f"paused {child.name} (pid {pid}) with SIGSTOP"
            journal.record("process_paused", message, process=child.name, pid=pid)
            return message
        if op == "resume":
            if child.state != "paused":
                raise ControlError(f"{child.name} (pid {pid}) is not paused")
            process.send_signal(signal.SIGCONT)
            child.state = "running" if child.listening else "starting"
            message = f"resumed {child.name} (pid {pid}) with SIGCONT"
            journal.record("process_resumed", message, process=child.name, pid=pid)
            return message
        return await self._terminate(child, process)

    async def _kill(
        self, child: SupervisedProcess, process: asyncio.subprocess.Process, stay_down: bool
    ) -> str:
        child.by_request = True
        child.stay_down = stay_down  # set before the signal: the supervisor reads it at the exit
        process.kill()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), KILL_WAIT_S)
        await asyncio.sleep(0)  # let the supervisor see the exit first
        killed = f"killed {child.name} (pid {process.pid}) with SIGKILL"
        if stay_down:
            # The reply's state is the parked one, not the running it had a moment ago.
            deadline = time.monotonic() + KILL_WAIT_S
            while not child.parked and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            return f"{killed}; staying down until rlog chaos restart {child.name}"
        policy = self.cluster.config.cluster.restart_policy
        restarts = self.supervisor.should_restart(-signal.SIGKILL)
        after = "restarting it" if restarts else "leaving it down"
        return f"{killed}; restart policy {policy}: {after}"

    async def _terminate(
        self, child: SupervisedProcess, process: asyncio.subprocess.Process
    ) -> str:
        child.by_request = True
        code = await self.supervisor.stop(child)
        await asyncio.sleep(0)
        policy = self.cluster.config.cluster.restart_policy
        exited = describe_exit(code) if code is not None else "unknown status"
        restarts = code is not None and self.supervisor.should_restart(code)
        after = "restarting it" if restarts else "stopped"
        return (
            f"terminated {child.name} (pid {process.pid}) with SIGTERM: exited with {exited}; "
            f"restart policy {policy}: {after}"
        )

    async def _restart(self, child: SupervisedProcess) -> str:
        old_pid = child.pid
        if child.alive:
            child.restart_requested = True
            await self.supervisor.stop(child)
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
