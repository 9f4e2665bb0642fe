"""One rlogd run from start to stop: the control socket, the controller and the brokers started
together, until SIGTERM or SIGINT (or until the restart policy gave up on every broker), then
the orderly shutdown."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import logging
import os
import signal
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

from rlog.daemon.config import RlogConfig
from rlog.daemon.control import ControlServer
from rlog.daemon.data_dir import socket_path
from rlog.daemon.exit_codes import ExitCode
from rlog.daemon.rlogd.chaos_control import ChaosControl, not_in_force
from rlog.daemon.rlogd.children import CONTROLLER_MODULE, controller_endpoint
from rlog.daemon.rlogd.cluster import Cluster
from rlog.daemon.rlogd.dynamic_configs import clear_stale_dynamic_configs
from rlog.daemon.rlogd.hot_reload import ConfigReloader
from rlog.daemon.rlogd.process import describe_exit
from rlog.daemon.rlogd.process_control import ProcessControl
from rlog.daemon.rlogd.stats import sample_forever
from rlog.daemon.rlogd.supervisor import Supervisor

log = logging.getLogger("rlogd")

# How long rlogd waits for the controller to listen before it says so and runs on (the
# brokers keep retrying to reach it themselves).
CONTROLLER_START_WAIT_S = 30.0


class Rlogd:
    """The running daemon; what its control socket steers (rlog.daemon.control.Controlled)."""

    def __init__(
        self,
        data_dir: Path,
        config: RlogConfig,
        config_path: Path | None,
        cluster_id: str,
        flags: dict[str, int] | None = None,
        nodes: frozenset[str] | None = None,
    ) -> None:
        self.cluster = Cluster.create(data_dir, config, config_path, cluster_id, flags or {}, nodes)
        self.supervisor = Supervisor(self.cluster)
        self.process_control = ProcessControl(self.cluster, self.supervisor)
        self.chaos = ChaosControl(self.cluster)
        self.reloader = ConfigReloader(self.cluster)
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- the control socket's requests ------------------------------------------------------
    def status_document(self) -> dict[str, Any]:
        return self.cluster.status_document()

    async def control(self, op: str, target: str, *, stay_down: bool = False) -> dict[str, Any]:
        reply = await self.process_control.apply(op, target, stay_down=stay_down)
        if op == "resume":
            # Chaos rules changed while it was stopped take effect now, before the answer (as
            # every chaos request's do): a client's next request meets them.
            reply["message"] += not_in_force(await self.chaos.await_in_force([reply["target"]]))
        return reply

    async def chaos_request(self, op: str, request: dict[str, Any]) -> dict[str, Any]:
        return await self.chaos.apply(op, request)

    async def config_request(self, op: str, request: dict[str, Any]) -> dict[str, Any]:
        return await self.reloader.request(op, request)

    # -- start to stop ----------------------------------------------------------------------
    async def run(self) -> int:
        cluster = self.cluster
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        control = ControlServer(socket_path(cluster.data_dir), self)
        await control.start()
        self.chaos.heal_all()
        cluster.write_status()
        runs = f"{len(cluster.brokers)} brokers"
        if not cluster.runs_every_node:
            runs = ", ".join(child.name for child in cluster.processes) + " (--nodes)"
            self._tell_other_hosts()
        cluster.journal.record(
            "rlogd_started",
            f"rlogd started (pid {os.getpid()}, {runs}, cluster {cluster.cluster_id})",
            pid=os.getpid(),
            brokers=len(cluster.brokers),
            cluster_id=cluster.cluster_id,
        )
        sampler = asyncio.create_task(sample_forever(cluster))
        try:
            return await self._run_until_stopped(stop)
        finally:
            sampler.cancel()
            await self.supervisor.stop_all()
            await control.close()
            cluster.journal.record("rlogd_stopped", "rlogd stopped", pid=os.getpid())
            cluster.journal.close()

    async def _run_until_stopped(self, stop: asyncio.Event) -> int:
        cluster = self.cluster
        stopping = asyncio.create_task(stop.wait())
        controller_up = asyncio.create_task(self._start_controller())
        # The brokers start beside the controller rather than after it: each process spends
        # most of its start importing, and a broker retries reaching the controller every
        # 0.2 s, so it registers as soon as the controller listens. If the controller cannot
        # start, the brokers are stopped with everything else on the way out.
        for broker in cluster.brokers:
            self.supervisor.start(broker)
        await asyncio.wait({stopping, controller_up}, return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            controller_up.cancel()
            return ExitCode.OK
        if not controller_up.result():
            stopping.cancel()
            return ExitCode.FAILURE
        if cluster.controller is not None:  # the file of the controller's host is the one
            host, port, tls = cluster.controller_address()
            self._background(clear_stale_dynamic_configs((host, port), tls))
        watcher = self.reloader.watch()
        # Run until asked to stop, or until the policy gave up on every broker.
        while not stop.is_set() and not self._brokers_gave_up():
            cluster.changed.clear()
            changed = asyncio.create_task(cluster.changed.wait())
            await asyncio.wait({stopping, changed}, return_when=asyncio.FIRST_COMPLETED)
            changed.cancel()
        stopping.cancel()
        if watcher is not None:
            watcher.stop()
        if stop.is_set():
            return ExitCode.OK
        failed = any(b.state == "failed" or b.last_exit == ExitCode.CONFIG for b in cluster.brokers)
        return ExitCode.FAILURE if failed else ExitCode.OK

    async def _start_controller(self) -> bool:
        """Start the controller and wait until it listens; False if it cannot start. True at
        once if it runs on another host: the brokers keep trying to reach it and log that."""
        cluster = self.cluster
        controller = cluster.controller
        if controller is None:
            return True
        if not _runnable(CONTROLLER_MODULE):
            log.error("the controller (%s) is not installed; cannot start", CONTROLLER_MODULE)
            return False
        self.supervisor.start(controller)
        deadline = time.monotonic() + CONTROLLER_START_WAIT_S
        while not cluster.stopping and time.monotonic() < deadline:
            if controller.state == "running":
                return True
            if controller.parked:
                log.error(
                    "the controller could not start (%s; see %s); stopping the brokers",
                    describe_exit(controller.last_exit or 0),
                    controller.log_path,
                )
                return False
            cluster.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(cluster.changed.wait(), 0.2)
        if not cluster.stopping:
            log.warning(
                "the controller does not listen after %.0f s; the brokers keep trying to reach it",
                CONTROLLER_START_WAIT_S,
            )
        return True

    def _brokers_gave_up(self) -> bool:
        """Every broker is down for good and none by request: nothing left to supervise. (A
        host that runs only the controller has no broker to give up on.)"""
        brokers = self.cluster.brokers
        return bool(brokers) and all(b.parked and not b.by_request for b in brokers)

    def _tell_other_hosts(self) -> None:
        """Part of the cluster runs elsewhere: say what this host runs, where the controller is,
        and (on the controller's host) how the other hosts join."""
        cluster = self.cluster
        controller = controller_endpoint(cluster.config)
        local = ", ".join(child.name for child in cluster.processes)
        log.info(
            "this host runs %s of cluster %s; the controller is at %s:%d",
            local,
            cluster.cluster_id,
            controller.host,
            controller.port,
        )
        if cluster.controller is not None:
            log.info(
                "on each other host: rlogd --config FILE --data-dir DIR --nodes broker-N "
                "--cluster-id %s",
                cluster.cluster_id,
            )

    def _background(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coroutine)
        self._tasks.add(task)  # the loop keeps only a weak reference to a task
        task.add_done_callback(self._tasks.discard)


def _runnable(module: str) -> bool:
    """Whether `python -m module` has something to run (a module, or a package's __main__)."""
    try:
        spec = importlib.util.find_spec(module)
        if spec is not None and spec.submodule_search_locations is not None:
            spec = importlib.util.find_spec(f"{module}.__main__")
    except (ImportError, ValueError):
        return False
    return spec is not None
