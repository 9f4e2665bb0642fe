"""Chaos inside one broker: cut network links, added delay, a full or stalled disk, lost answers.

rlogd writes the rules to the broker's faults file (JSON, shaped as rlog.daemon.faults_file
says) and sends it SIGUSR1; the broker reads the file again then, and at start, so a cut link
stays cut across a restart, as a real network partition would. Each read ends by writing the
rules now in force to faults.applied.json beside it: rlogd answers a chaos request only once they
are there, so a request a client sends after `rlog chaos` returns meets the new rules (the
signal alone is handled when the event loop gets to it, maybe after requests already read).
The rules act where the traffic is:
- inbound: a request from a cut peer closes its connection (like a firewall's REJECT), so
  the peer sees a dead link, retries and backs off;
- outbound: requests to a cut peer (the controller, another broker) fail at once;
- delay: every request in and out waits `delay_ms` first, behind the ones before it on its
  connection (a slow link delays a stream, it does not reorder it);
- disk: "full" makes every log append and checkpoint write fail with ENOSPC; "stall" makes every
  log write and fsync hang for STALL_S first. Either takes the broker's log dir offline (the
  file system reports every write to log_dir.py's LogDirHealth): it answers KAFKA_STORAGE_ERROR,
  asks to be fenced so its leaderships move, and restarts once the disk is "ok" again;
- lost answers: the next `lose_answers` answers to Kafka clients' Produce requests are dropped
  after the append and the connection closed (daemon/broker/server.py asks `take_lost_answer`),
  so the client retries a batch the log already holds: Kafka's classic duplicate, unless the
  producer is idempotent. The countdown starts again whenever rlogd arms it (a new
  lose-answers request), including on the broker's first read of the file at start.

Peers are named as rlogd names processes: "broker-N", "controller", and "clients" for
everything that is not an rlog process (Kafka clients).
"""

from __future__ import annotations

import errno
import logging
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from rlog.core.storage.files import Buffer, FaultyFile, FaultyFileSystem, LogFile
from rlog.daemon.broker.log_dir import SLOW_FSYNC_S, LogDirHealth
from rlog.daemon.data_dir import faults_applied_path
from rlog.daemon.faults_file import CLIENTS, FaultRules, FaultsFileError
from rlog.daemon.wire import WireError

log = logging.getLogger(__name__)

STALL_S = 2.0  # how long each log write or fsync hangs while the disk is stalled
_RLOG_CLIENT_ID = re.compile(r"^(broker-\d+)(-[a-z]+)?$")


def peer_of(client_id: str | None) -> str:
    """Which process sent a request, from the client id rlog's own clients use."""
    match = _RLOG_CLIENT_ID.match(client_id or "")
    return match.group(1) if match else CLIENTS


@dataclass
class Faults:
    """The rules in force, shared by the server, the outbound clients and the file system."""

    path: Path | None
    rules: FaultRules = field(default_factory=FaultRules)
    file_system: ChaosFileSystem = field(default_factory=lambda: ChaosFileSystem())
    answers_to_lose: int = 0  # the countdown of lost Produce answers

    def reload(self) -> None:
        if self.path is None:
            return
        try:
            rules = FaultRules.read(self.path)
        except FaultsFileError as error:
            log.error("ignoring the faults file %s: %s", self.path, error)
            return
        if rules != self.rules:
            log.warning("chaos: %s", rules.describe())
        # Armed afresh only by a lose-answers request: a reload for another rule (a new cut, a
        # delay) must not hand out more losses than were asked for.
        if _lost_answers_rule(rules) != _lost_answers_rule(self.rules):
            self.answers_to_lose = rules.lose_answers
        self.rules = rules
        self.file_system.faults.disk_full = rules.disk == "full"
        self.file_system.stalled = rules.disk == "stall"
        try:
            rules.write(faults_applied_path(self.path))
        except OSError as error:  # rlogd reports the rules as not confirmed
            log.error("cannot acknowledge the chaos rules: %s", error)

    def is_cut(self, peer: str) -> bool:
        return peer in self.rules.cut

    def take_lost_answer(self, client_id: str | None, correlation_id: int) -> bool:
        """Whether to drop this answer to a client's Produce, which the log already holds; True
        uses up one of the losses asked for."""
        if self.answers_to_lose <= 0:
            return False
        self.answers_to_lose -= 1
        log.warning(
            "chaos: lost the answer to Produce %d from client %r after the append; "
            "closing its connection (%d more to lose)",
            correlation_id,
            client_id,
            self.answers_to_lose,
        )
        return True

    def gate(self, peer: str) -> OutboundGate:
        return OutboundGate(self, peer)


def _lost_answers_rule(rules: FaultRules) -> tuple[int, int]:
    return rules.lose_answers, rules.lose_answers_request


@dataclass(frozen=True)
class OutboundGate:
    """Called by a wire client before each request to `peer`."""

    faults: Faults
    peer: str

    def open_now(self) -> bool:
        """No rule holds the link: the request goes at once, without the coroutine below."""
        rules = self.faults.rules
        return not rules.delay_ms and self.peer not in rules.cut

    def delay_s(self) -> float:
        return self.faults.rules.delay_ms / 1000

    def check(self) -> None:
        if self.faults.is_cut(self.peer):
            raise WireError(f"link to {self.peer} cut (chaos)")


class StallingFile(FaultyFile):
    """A log file whose writes the chaos disk may stall, each watched by the log dir's health."""

    def __init__(self, path: str, create: bool, file_system: ChaosFileSystem) -> None:
        super().__init__(path, create, file_system.faults)
        self._file_system = file_system

    def append(self, data: Buffer) -> None:
        with self._file_system.health.watch("append to", self.name):
            super().append(data)

    def _write(self, data: memoryview) -> int:
        self._file_system.stall()
        return super()._write(data)

    def sync(self) -> None:
        with self._file_system.health.watch("fsync of", self.name, SLOW_FSYNC_S):
            self._file_system.stall()
            super().sync()

    def truncate(self, size: int) -> None:
        with self._file_system.health.watch("truncation of", self.name):
            super().truncate(size)


class ChaosFileSystem(FaultyFileSystem):
    """Real files; a full disk through FaultyFileSystem's faults, and a stalled one here (the
    event loop blocks, as a broker's request threads would on a hung disk). Every call that
    writes is watched by `health`, which decides when the log dir has failed."""

    def __init__(self) -> None:
        super().__init__()
        self.stalled = False
        self.health = LogDirHealth()

    def open(self, path: str, create: bool) -> LogFile:
        with self.health.watch("open of", path):
            return StallingFile(path, create, self)

    def stall(self) -> None:
        if self.stalled:
            time.sleep(STALL_S)

    def _fsync(self, fd: int) -> None:
        self.stall()
        super()._fsync(fd)

    def replace_atomically(self, path: str, data: bytes) -> None:
        with self.health.watch("write of", path, SLOW_FSYNC_S):
            if self.faults.disk_full:  # checkpoints need space too
                raise OSError(errno.ENOSPC, "No space left on device (injected)", path)
            super().replace_atomically(path, data)

    def sync_dir(self, path: str) -> None:
        with self.health.watch("fsync of", path, SLOW_FSYNC_S):
            super().sync_dir(path)

    def rename(self, src: str, dst: str) -> None:
        with self.health.watch("rename of", src):
            super().rename(src, dst)

    def remove(self, path: str) -> None:
        with self.health.watch("removal of", path):
            super().remove(path)

    def remove_tree(self, path: str) -> None:
        with self.health.watch("removal of", path, SLOW_FSYNC_S):
            super().remove_tree(path)

    def makedirs(self, path: str) -> None:
        with self.health.watch("creation of", path):
            super().makedirs(path)
