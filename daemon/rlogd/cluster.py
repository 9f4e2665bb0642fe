"""What one rlogd run shares among its parts (its config, its children, its event journal),
and the status document it makes of them: rlogd.json and the control socket's `status`."""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlog.daemon.config import BrokerSettings, RlogConfig
from rlog.daemon.control import ControlError
from rlog.daemon.data_dir import CONTROLLER, socket_path, status_path
from rlog.daemon.events import EventJournal, journal_path
from rlog.daemon.rlogd.children import (
    broker_processes,
    controller_endpoint,
    controller_process,
    node_names,
)
from rlog.daemon.rlogd.data_files import write_json_atomically
from rlog.daemon.rlogd.process import SupervisedProcess
from rlog.daemon.tls import client_context, client_tls_files


@dataclass
class Cluster:
    """The state rlogd's supervisor, control requests and config reloads all act on."""

    data_dir: Path
    config: RlogConfig  # replaced when an edit of the config file is applied
    config_path: Path | None
    cluster_id: str
    controller: SupervisedProcess | None  # None: it runs on another host (--nodes)
    brokers: list[SupervisedProcess]  # those of this host
    journal: EventJournal
    # [cluster] keys rlogd's flags set (--brokers, --base-port): they stay over the file's.
    flags: dict[str, int] = field(default_factory=dict)
    stopping: bool = False
    started_at_ms: int = field(default_factory=lambda: time.time_ns() // 1_000_000)
    # Set on every status change: what waits for a process to start or give up wakes on it.
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    _tls: tuple[BrokerSettings, ssl.SSLContext] | None = field(default=None, repr=False)

    @classmethod
    def create(
        cls,
        data_dir: Path,
        config: RlogConfig,
        config_path: Path | None,
        cluster_id: str,
        flags: dict[str, int] | None = None,
        nodes: frozenset[str] | None = None,
    ) -> Cluster:
        """`nodes`: the processes this rlogd runs (--nodes; None: all of them)."""
        runs_controller = nodes is None or CONTROLLER in nodes
        return cls(
            data_dir=data_dir,
            config=config,
            config_path=config_path,
            cluster_id=cluster_id,
            flags=dict(flags or {}),
            controller=(
                controller_process(data_dir, config, config_path, cluster_id)
                if runs_controller
                else None
            ),
            brokers=broker_processes(data_dir, config, config_path, cluster_id, nodes),
            journal=EventJournal(journal_path(data_dir, "rlogd"), "rlogd"),
        )

    @property
    def processes(self) -> list[SupervisedProcess]:
        return [self.controller, *self.brokers] if self.controller else list(self.brokers)

    @property
    def runs_every_node(self) -> bool:
        return [child.name for child in self.processes] == node_names(self.config)

    def controller_address(self) -> tuple[str, int, ssl.SSLContext | None]:
        """Where rlogd reaches the controller: its own child, else the host the config
        advertises it at; and the TLS to speak there."""
        if self.controller is not None:
            child = self.controller
            return child.host, child.port, self.tls_for(child)
        listener = controller_endpoint(self.config)
        tls = self._client_tls() if listener.security_protocol == "SSL" else None
        return listener.host, listener.port, tls

    def process(self, name: str) -> SupervisedProcess:
        """The child called `name`, or the control API's unknown-target refusal."""
        for child in self.processes:
            if child.name == name:
                return child
        known = ", ".join(child.name for child in self.processes)
        if name in node_names(self.config):
            raise ControlError(
                f"{name} runs on another host: this rlogd runs {known} (--nodes)",
                "unknown-target",
            )
        raise ControlError(f"unknown target {name!r} (known: {known})", "unknown-target")

    def tls_for(self, child: SupervisedProcess) -> ssl.SSLContext | None:
        """How rlogd connects to `child`: TLS with the brokers' own files if its listener is
        SSL (daemon/tls.py), made again when the config changes."""
        return self._client_tls() if child.tls else None

    def _client_tls(self) -> ssl.SSLContext:
        made = self._tls
        if made is None or made[0] is not self.config.broker:
            made = self._tls = (self.config.broker, client_context(self.config.broker))
        return made[1]

    def status_document(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "started_at_ms": self.started_at_ms,
            "config": str(self.config_path) if self.config_path else None,
            "cluster_id": self.cluster_id,
            "restart_policy": self.config.cluster.restart_policy,
            "control_socket": str(socket_path(self.data_dir)),
            "controller": self.controller.status() if self.controller else None,
            "brokers": [b.status() for b in self.brokers],
            # How rlog's own clients reach the brokers' first listener: the CLI takes these.
            "client_tls": (
                client_tls_files(self.config.broker)
                if self.brokers and self.brokers[0].tls
                else None
            ),
        }

    def write_status(self) -> None:
        write_json_atomically(status_path(self.data_dir), self.status_document())
        self.changed.set()
