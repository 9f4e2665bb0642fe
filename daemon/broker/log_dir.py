"""The health of a broker's log dir, as Kafka's LogDirFailureChannel keeps it.

Every storage call that writes (append, fsync, truncate, checkpoint, roll, rename, remove) goes
through the broker's file system (faults.py), which reports to `LogDirHealth`. The first call
that fails with an error of the device (EIO, ENOSPC, EROFS, EDQUOT), or that takes longer than
its bound (`SLOW_CALL_S` for a write, `SLOW_FSYNC_S` for an fsync), marks the dir failed. The
time is measured around the call here because the event loop is blocked while it runs: a broker
on a hung disk answers nothing, so it must stop leading. Time the thread spent runnable but
waiting for a CPU (the kernel's schedstat) is left out: on a machine loaded far beyond its
cores a quick write can take seconds of wall time, and that is no fault of the disk. The
driver then steps `LogDirFailed` into the core (core_driver.py) and `LogDirRecovery` takes
over: the broker asks the controller to fence it (its leaderships and ISR places move to
in-sync replicas), the log cleaner stops, and the disk is probed every `PROBE_INTERVAL_S`
through the same file system. Kafka needs a restart to bring a failed dir back, and so does
rlog: once a probe works the broker stops and exits with LOG_DIR_RECOVERED, which rlogd restarts
at once; the new process recovers the logs as after a crash.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Sequence
from types import FrameType

from rlog.core.storage.files import FileSystem

log = logging.getLogger(__name__)

# A write (to the page cache), open, rename or truncation slower than this takes the log dir
# offline: healthy disks answer in milliseconds, and a leader on a disk that needs more than a
# second for one call holds every producer waiting.
SLOW_CALL_S = 1.5
# An fsync (or a checkpoint, which fsyncs, or the removal of a whole directory) slower than this:
# its time grows with the bytes it flushes (a 1 GiB segment at its roll takes seconds on a good
# disk), so only a disk that hangs trips it. Kafka's log.dir.failure.timeout.ms is 30 s too.
SLOW_FSYNC_S = 30.0
PROBE_INTERVAL_S = 1.0  # how often an offline dir is tried again
PROBE_FILE = ".rlog-log-dir-probe"  # written, fsynced and removed by each probe
# Errors of the device, not of the caller (ENOENT, EEXIST... are the code's own business).
DEVICE_ERRNOS = frozenset({errno.EIO, errno.ENOSPC, errno.EROFS, errno.EDQUOT})


# How stale the run-queue reading taken before a storage call may be. Reading it costs a system
# call, and the small-request path makes an append per request: a reading up to this old only
# counts a little more of the time before the call as waiting, far below any bound it is used for.
RUN_QUEUE_READING_MAX_AGE_S = 0.1


class RunQueueClock:
    """Seconds the calling thread has spent runnable but not running (the second field of
    /proc/thread-self/schedstat), read with one pread on a file kept open per thread; always 0
    where the kernel does not keep it."""

    def __init__(self) -> None:
        self._files = threading.local()

    def recent(self) -> float:
        """This thread's reading, taken again only if the last is older than
        RUN_QUEUE_READING_MAX_AGE_S: for the start of a call, never for its end."""
        files = self._files
        now = time.monotonic()
        if now - getattr(files, "read_at", -RUN_QUEUE_READING_MAX_AGE_S) >= (
            RUN_QUEUE_READING_MAX_AGE_S
        ):
            files.read_at, files.reading = now, self()
        return float(files.reading)

    def __call__(self) -> float:
        fd = getattr(self._files, "fd", None)
        if fd is None:
            try:
                fd = os.open(f"/proc/self/task/{threading.get_native_id()}/schedstat", os.O_RDONLY)
            except OSError:
                fd = -1
            self._files.fd = fd
        if fd < 0:
            return 0.0
        try:
            return int(os.pread(fd, 64, 0).split()[1]) / 1e9
        except (OSError, IndexError, ValueError):
            return 0.0


class LogDirHealth:
    """Watches storage calls; `failure` says why the dir failed (the first reason), or None."""

    def __init__(self, run_queue_s: Callable[[], float] | None = None) -> None:
        """`run_queue_s`: a clock of the thread's run-queue wait (tests give their own); by
        default RunQueueClock, whose reading before a call may be a little old (`recent`)."""
        if run_queue_s is None:
            clock = RunQueueClock()
            self._run_queue_s: Callable[[], float] = clock
            self._run_queue_before: Callable[[], float] = clock.recent
        else:
            self._run_queue_s = self._run_queue_before = run_queue_s
        self.failure: str | None = None
        # Once the dir failed, writes fail at once (a stalled disk blocks the event loop for one
        # call, not for every call left in the same Ready), except the recovery's probes.
        self.probing = False
        # SIGCONTs seen: a call the process was stopped during (rlog chaos pause) was not slow.
        self._resumes = 0

    def install_resume_handler(self) -> None:
        """Count SIGCONTs with a plain signal handler: it runs as soon as the interrupted call
        returns, before `watch` looks at the time (an event loop handler would run later)."""
        signal.signal(signal.SIGCONT, self._resumed)

    def _resumed(self, _signum: int, _frame: FrameType | None) -> None:
        self._resumes += 1

    def watch(self, what: str, path: str, limit_s: float | None = None) -> _Watched:
        """Around one storage call: a device error or a call slower than `limit_s` (by default
        SLOW_CALL_S) fails the dir (the error still reaches the caller, which answers
        KAFKA_STORAGE_ERROR as before)."""
        if self.failure is not None and not self.probing:
            raise OSError(errno.EIO, f"log dir offline ({self.failure})", path)
        return _Watched(self, what, path, SLOW_CALL_S if limit_s is None else limit_s)

    def _check_time(
        self, what: str, path: str, took_s: float, resumes: int, limit_s: float, queued: float
    ) -> None:
        # A call (not inline code), so a pending SIGCONT handler has run before the comparison.
        if resumes != self._resumes:
            return  # stopped during the call (rlog chaos pause)
        waited_s = self._run_queue_s() - queued
        if took_s - waited_s > limit_s:
            self.fail(f"{what} {path} took {took_s:.1f} s (more than {limit_s:g} s)")
        else:
            log.warning(
                "%s %s took %.1f s, %.1f s of it waiting for a CPU: the machine is overloaded, "
                "the disk is not at fault",
                what,
                path,
                took_s,
                waited_s,
            )

    def fail(self, reason: str) -> None:
        if self.failure is None:
            self.failure = reason


class _Watched:
    """One watched storage call (a plain context manager: it runs for every log append)."""

    __slots__ = ("health", "limit_s", "path", "queued", "resumes", "started", "what")

    def __init__(self, health: LogDirHealth, what: str, path: str, limit_s: float) -> None:
        self.health, self.what, self.path, self.limit_s = health, what, path, limit_s

    def __enter__(self) -> None:
        health = self.health
        self.resumes, self.started = health._resumes, time.monotonic()
        self.queued = health._run_queue_before()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, _tb: object
    ) -> None:
        health = self.health
        if isinstance(error, OSError):
            if error.errno in DEVICE_ERRNOS:
                health.fail(f"{self.what} {self.path} failed: {error.strerror or error}")
            return  # the error still reaches the caller
        if error is not None:
            return
        took_s = time.monotonic() - self.started
        if took_s > self.limit_s:  # rare: only then is the run queue read a second time
            health._check_time(
                self.what, self.path, took_s, self.resumes, self.limit_s, self.queued
            )


def probe(fs: FileSystem, data_dir: str) -> str | None:
    """Write, fsync and remove a small file in `data_dir` through `fs` (the broker's own file
    system, faults included); None if that worked in time, else why not."""
    path = os.path.join(data_dir, PROBE_FILE)
    started = time.monotonic()
    try:
        file = fs.open(path, create=True)
        try:
            file.truncate(0)  # a probe a crash interrupted
            file.append(b"rlog log dir probe\n")
            file.sync()
        finally:
            file.close()
        fs.remove(path)
        fs.sync_dir(data_dir)
    except OSError as error:
        return error.strerror or str(error)
    took_s = time.monotonic() - started
    if took_s > SLOW_CALL_S:
        return f"took {took_s:.1f} s"
    return None


async def probe_until_it_works(fs: FileSystem, data_dir: str, health: LogDirHealth) -> None:
    """Probe every PROBE_INTERVAL_S until a probe works (in a thread: a stalled disk must not
    block the event loop, which keeps heartbeating). Only probes write from now on."""
    health.probing = True
    last_reason = None
    while True:
        reason = await asyncio.to_thread(probe, fs, data_dir)
        if reason is None:
            return
        if reason != last_reason:
            log.warning("log dir %s still failing: %s", data_dir, reason)
            last_reason = reason
        await asyncio.sleep(PROBE_INTERVAL_S)


class LogDirRecovery:
    """What the broker does once its log dir failed (see the module's docstring); `recovered`
    once a probe worked and the broker was asked to stop for its restart."""

    def __init__(
        self, offline: asyncio.Event, fs: FileSystem, health: LogDirHealth, data_dir: str
    ) -> None:
        self._offline = offline
        self._fs = fs
        self._health = health
        self._data_dir = data_dir
        self.recovered = False

    async def run(
        self,
        ask_to_be_fenced: Callable[[], None],
        writers: Sequence[asyncio.Task[None]],
        stop_writing: Callable[[], Awaitable[None]],
        stop: asyncio.Event,
    ) -> None:
        """Wait for the dir to fail; ask to be fenced, cancel `writers` (the log cleaner) and
        wait on `stop_writing`; probe until the disk works, then set `recovered` and `stop`."""
        await self._offline.wait()
        ask_to_be_fenced()
        for task in writers:
            task.cancel()
        await stop_writing()
        await probe_until_it_works(self._fs, self._data_dir, self._health)
        log.warning(
            "log dir %s works again: stopping, to be restarted and recover it", self._data_dir
        )
        self.recovered = True
        stop.set()
