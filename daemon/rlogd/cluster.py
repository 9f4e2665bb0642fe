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
from rlog.daemon.data_dir import socket_path, status_path
from rlog.daemon.events import EventJournal, journal_path
from rlog.daemon.rlogd.children import broker_processes, controller_process
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
    controller: SupervisedProcess
    brokers: list[SupervisedProcess]
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
    ) -> Cluster:
        return cls(
            data_dir=data_dir,
            config=config,
            config_path=config_path,
            cluster_id=cluster_id,
            flags=dict(flags or {}),
            controller=controller_process(data_dir, config, config_path, cluster_id),
            brokers=broker_processes(data_dir, config, config_path, cluster_id),
            journal=EventJournal(journal_path(data_dir, "rlogd"), "rlogd"),
        )

    @property
    def processes(self) -> list[SupervisedProcess]:
        return [self.controller, *self.brokers]

    def process(self, name: str) -> SupervisedProcess:
        """The child called `name`, or the control API's unknown-target refusal."""
        for child in self.processes:
            if child.name == name:
                return child
        known = ", ".join(child.name for child in self.processes)
        raise ControlError(f"unknown target {name!r} (known: {known})", "unknown-target")

    def tls_for(self, child: SupervisedProcess) -> ssl.SSLContext | None:
        """How rlogd connects to `child`: TLS with the brokers' own files if its listener is
        SSL (daemon/tls.py), made again when the config changes."""
        if not child.tls:
            return None
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
            "controller": self.controller.status(),
            "brokers": [b.status() for b in self.brokers],
            # How rlog's own clients reach the brokers' first listener: the CLI takes these.
            "client_tls": client_tls_files(self.config.broker) if self.brokers[0].tls else None,
        }

    def write_status(self) -> None:
        write_json_atomically(status_path(self.data_dir), self.status_document())
        self.changed.set()
