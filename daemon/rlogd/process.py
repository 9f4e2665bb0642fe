"""One child rlogd keeps alive (the controller or a broker): what it is, how it fares, and how
its exit reads."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlog.core.metadata.records import Endpoint
from rlog.daemon.rlogd.stats import ProcessStats

HOST = "127.0.0.1"  # every child listens on loopback
GAVE_UP = ("stopped", "failed")  # states the restart policy leaves a process in


@dataclass
class SupervisedProcess:
    """One child rlogd keeps alive: the controller or a broker."""

    name: str
    role: str  # "controller" or "broker"
    node_id: int | None
    port: int  # where rlogd and the CLI reach it: a broker's inter-broker listener
    data_dir: Path
    log_path: Path
    argv: list[str]
    host: str = HOST
    tls: bool = False  # that listener speaks SSL
    listeners: list[Endpoint] = field(default_factory=list)  # a broker's, as it advertises them
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
    # Killed with --stay-down: parked whatever the restart policy, until a `restart` request.
    stay_down: bool = False
    spawns: int = 0  # times started by this rlogd: the first is a start, later ones restarts
    previous_pid: int | None = None
    # A broker's current process, as it registers with the controller (a new one per start).
    incarnation_id: str | None = None
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
            "host": self.host,
            "port": self.port,
            "tls": self.tls,
            "listeners": [asdict(endpoint) for endpoint in self.listeners],
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


def signal_name(code: int) -> str | None:
    """The signal that ended a process (a negative exit code), by name."""
    if code >= 0:
        return None
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
    return f"code {code}"
