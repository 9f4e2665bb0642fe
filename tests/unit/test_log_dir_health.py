"""The broker daemon's verdict on its log dir (daemon/broker/log_dir.py): which storage calls
fail the dir (a device error, or a call slower than SLOW_CALL_S that no SIGCONT explains), that
writes fail at once afterwards except the recovery's probes, and what a probe finds through the
chaos file system (real files in tmp_path)."""

from __future__ import annotations

import errno
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlog.daemon.broker import faults, log_dir
from rlog.daemon.broker.faults import ChaosFileSystem
from rlog.daemon.broker.log_dir import PROBE_FILE, LogDirHealth, probe


@pytest.fixture
def fast(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 50 ms bound and a 200 ms stall, so slowness is quick to show."""
    monkeypatch.setattr(log_dir, "SLOW_CALL_S", 0.05)
    monkeypatch.setattr(faults, "STALL_S", 0.2)


@pytest.fixture
def health() -> Iterator[LogDirHealth]:
    previous = signal.getsignal(signal.SIGCONT)
    found = LogDirHealth()
    found.install_resume_handler()
    yield found
    signal.signal(signal.SIGCONT, previous)


def test_device_errors_fail_the_dir_and_still_reach_the_caller(health: LogDirHealth) -> None:
    with pytest.raises(FileNotFoundError), health.watch("removal of", "/x"):
        raise FileNotFoundError(errno.ENOENT, "gone")
    assert health.failure is None  # the code's own business, not the disk's
    with pytest.raises(OSError, match="No space"), health.watch("append to", "/x/0.log"):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert health.failure == "append to /x/0.log failed: No space left on device"
    with pytest.raises(OSError) as refused, health.watch("append to", "/x/1.log"):
        raise AssertionError("a write after the failure must not run")
    assert refused.value.errno == errno.EIO and "offline" in str(refused.value)
    health.probing = True
    with health.watch("append to", PROBE_FILE):
        pass  # the recovery's probes still write


@pytest.mark.usefixtures("fast")
def test_a_slow_call_fails_the_dir_unless_the_process_was_paused(health: LogDirHealth) -> None:
    with health.watch("fsync of", "/x/0.log"):
        os.kill(os.getpid(), signal.SIGCONT)  # what `rlog chaos resume` sends after a pause
        time.sleep(0.1)
    assert health.failure is None
    with health.watch("fsync of", "/x/0.log"):
        time.sleep(0.1)
    assert health.failure is not None and "fsync of /x/0.log took 0.1 s" in health.failure


@pytest.mark.usefixtures("fast")
def test_a_call_slow_only_for_want_of_a_cpu_does_not_fail_the_dir() -> None:
    """On a machine loaded beyond its cores a quick write can take seconds of wall time: the
    time the thread waited in the run queue is not the disk's."""
    waited = [0.0]
    health = LogDirHealth(run_queue_s=lambda: waited[0])
    with health.watch("append to", "/x/0.log"):
        time.sleep(0.1)
        waited[0] += 0.09  # of 0.1 s, 0.09 s runnable but not running
    assert health.failure is None
    with health.watch("append to", "/x/0.log"):
        time.sleep(0.1)
        waited[0] += 0.01  # mostly blocked in the call itself: the disk
    assert health.failure is not None and "append to /x/0.log took 0.1 s" in health.failure


def test_the_run_queue_clock_reads_this_threads_wait() -> None:
    clock = log_dir.RunQueueClock()
    first = clock()
    deadline = time.monotonic() + 0.05
    while time.monotonic() < deadline:  # run a little: the wait can only grow
        pass
    assert 0.0 <= first <= clock()


def test_the_reading_before_a_call_is_taken_at_most_every_tenth_of_a_second() -> None:
    """An append per request must not cost a schedstat read each: the reading before a call may
    be up to RUN_QUEUE_READING_MAX_AGE_S old (the one after a slow call is always fresh)."""
    reads = []

    class CountingClock(log_dir.RunQueueClock):
        def __call__(self) -> float:
            reads.append(1)
            return super().__call__()

    clock = CountingClock()
    first = clock.recent()
    assert clock.recent() == first and len(reads) == 1
    time.sleep(log_dir.RUN_QUEUE_READING_MAX_AGE_S)
    assert clock.recent() >= first and len(reads) == 2


@pytest.mark.usefixtures("fast")
def test_a_probe_finds_a_full_a_stalled_and_a_working_disk(tmp_path: Path) -> None:
    fs = ChaosFileSystem()
    fs.health.probing = True  # as LogDirRecovery does: the first failure stops other writes
    fs.faults.disk_full = True
    assert probe(fs, str(tmp_path)) == "No space left on device (injected)"
    fs.faults.disk_full, fs.stalled = False, True
    reason = probe(fs, str(tmp_path))
    assert reason is not None and reason.startswith("took")
    fs.stalled = False
    assert probe(fs, str(tmp_path)) is None
    assert not (tmp_path / PROBE_FILE).exists()


def test_the_chaos_disk_reports_failed_appends_and_checkpoints(tmp_path: Path) -> None:
    fs = ChaosFileSystem()
    file = fs.open(str(tmp_path / "0.log"), create=True)
    file.append(b"x")
    assert fs.health.failure is None
    fs.faults.disk_full = True
    with pytest.raises(OSError) as full:
        fs.replace_atomically(str(tmp_path / "checkpoint"), b"0\n")
    assert full.value.errno == errno.ENOSPC  # a checkpoint needs space too
    assert fs.health.failure is not None and "checkpoint" in fs.health.failure
    assert file.size == 1 and os.path.getsize(tmp_path / "0.log") == 1
    file.close()
