"""psutil's view of each child (CPU, memory, open descriptors), sampled for rlogd.json."""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:
    from rlog.daemon.rlogd.cluster import Cluster

# How often each process's CPU, memory and open files are sampled (and rlogd.json rewritten).
STATS_INTERVAL_S = 1.0


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


async def sample_forever(cluster: Cluster) -> None:
    """Refresh each running process's psutil stats, and rlogd.json with them."""
    while True:
        await asyncio.sleep(STATS_INTERVAL_S)
        for child in cluster.processes:
            if child.alive:
                child.stats.sample()
        cluster.write_status()
