"""Which leader epoch wrote which offsets: the `leader-epoch-checkpoint` of one partition.

Entries (epoch, start offset) are ordered by both fields: epoch E's batches are the offsets from
its start up to the next entry's start (or the LEO for the latest epoch). A leader answers
OffsetsForLeaderEpoch from it and a follower uses it to find where its log diverges from the
leader's (KIP-101 / KIP-279) instead of truncating to its high watermark.

Every change is written through the log's FileSystem before it shows in memory, so a failed write
leaves the cache as it was. The file is derived data: when it is missing or does not parse, the
cache is rebuilt from the partitionLeaderEpoch of the log's batch headers.
"""

from __future__ import annotations

import os
from bisect import bisect_right
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

from rlog.core.records import BatchHeader
from rlog.core.storage.checkpoint import (
    LEADER_EPOCH_CHECKPOINT,
    CorruptCheckpointError,
    read_leader_epoch_checkpoint,
    write_leader_epoch_checkpoint,
)
from rlog.core.storage.files import FileSystem

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1


@dataclass(frozen=True, slots=True)
class EpochEntry:
    epoch: int
    start_offset: int


@dataclass(frozen=True, slots=True)
class CheckpointFile:
    """Where the cache persists itself; a cache without one lives in memory only (tests)."""

    fs: FileSystem
    path: str

    def write(self, entries: list[EpochEntry]) -> None:
        pairs = [(entry.epoch, entry.start_offset) for entry in entries]
        write_leader_epoch_checkpoint(self.fs, self.path, pairs)


class LeaderEpochCache:
    def __init__(
        self, entries: Iterable[EpochEntry] = (), *, checkpoint: CheckpointFile | None = None
    ) -> None:
        self._entries = list(entries)
        _check_ordered(self._entries)
        self._checkpoint = checkpoint
        # Whether load() had to rebuild the entries from the log (file missing or corrupt).
        self.rebuilt_from_log = False

    @classmethod
    def load(
        cls,
        fs: FileSystem,
        dir_path: str,
        headers: Iterable[BatchHeader],
        *,
        log_start_offset: int,
        log_end_offset: int,
    ) -> LeaderEpochCache:
        """The cache of the partition in `dir_path`, made consistent with its log.

        `headers` (the log's batch headers, oldest first) are read only if the file is missing
        or corrupt. Entries past the LEO (lost with an unsynced tail) or before the log start are
        dropped, as at runtime.
        """
        checkpoint = CheckpointFile(fs, os.path.join(dir_path, LEADER_EPOCH_CHECKPOINT))
        try:
            pairs = read_leader_epoch_checkpoint(fs, checkpoint.path)
            rebuild = not fs.exists(checkpoint.path)
        except CorruptCheckpointError:
            pairs, rebuild = [], True
        entries = [EpochEntry(epoch, offset) for epoch, offset in pairs]
        if rebuild:
            entries = _entries_from_headers(headers)
        cache = cls(entries, checkpoint=checkpoint)
        cache.rebuilt_from_log = rebuild
        kept = cache._without_end(log_end_offset)
        kept = _without_start(kept, log_start_offset)
        if rebuild or kept != cache._entries:
            cache._replace(kept)
        return cache

    # ---- queries ----

    @property
    def entries(self) -> tuple[EpochEntry, ...]:
        return tuple(self._entries)

    @property
    def latest_epoch(self) -> int:
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetsForLeaderEpoch (KIP-101 / KIP-279).

        The largest epoch <= `requested_epoch`, and where it ends: the next epoch's start, or
        `log_end_offset` for the latest. (-1, -1) when no epoch is that small (or none is known).
        """
        found = self._floor_index(requested_epoch)
        if found is None:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        following = found + 1
        if following < len(self._entries):
            return self._entries[found].epoch, self._entries[following].start_offset
        return self._entries[found].epoch, log_end_offset

    def _floor_index(self, epoch: int) -> int | None:
        if epoch < 0:
            return None
        index = bisect_right(self._entries, epoch, key=lambda entry: entry.epoch) - 1
        return index if index >= 0 else None

    # ---- changes (each written to the checkpoint first) ----

    def assign(self, epoch: int, start_offset: int) -> bool:
        """Record that `epoch` starts at `start_offset`; False (nothing changes) unless `epoch`
        is newer than every entry. An entry of an older epoch starting at or after the offset
        cannot describe the log any more and is dropped.
        """
        if epoch < 0 or start_offset < 0 or epoch <= self.latest_epoch:
            return False
        kept = self._without_end(start_offset)
        self._replace([*kept, EpochEntry(epoch, start_offset)])
        return True

    def truncate_from_end(self, offset: int) -> None:
        """The log was cut at `offset`: drop the epochs that start at or after it."""
        kept = self._without_end(offset)
        if kept != self._entries:
            self._replace(kept)

    def truncate_from_start(self, offset: int) -> None:
        """The log now starts at `offset`: the epoch holding it starts there, older ones go."""
        kept = _without_start(self._entries, offset)
        if kept != self._entries:
            self._replace(kept)

    def clear(self) -> None:
        if self._entries:
            self._replace([])

    def _without_end(self, offset: int) -> list[EpochEntry]:
        return [entry for entry in self._entries if entry.start_offset < offset]

    def _replace(self, entries: list[EpochEntry]) -> None:
        _check_ordered(entries)
        if self._checkpoint is not None:
            self._checkpoint.write(entries)  # raises OSError with the cache unchanged
        self._entries = entries

    def __repr__(self) -> str:
        pairs = ", ".join(f"({entry.epoch}, {entry.start_offset})" for entry in self._entries)
        return f"LeaderEpochCache([{pairs}])"


def _without_start(entries: list[EpochEntry], offset: int) -> list[EpochEntry]:
    """Entries once the log starts at `offset`: the last epoch starting at or below it is moved
    to start there, and the epochs before it are gone.
    """
    holding = bisect_right(entries, offset, key=lambda entry: entry.start_offset) - 1
    if holding < 0:
        return list(entries)
    return [EpochEntry(entries[holding].epoch, offset), *entries[holding + 1 :]]


def _entries_from_headers(headers: Iterable[BatchHeader]) -> list[EpochEntry]:
    """Each epoch's first batch, from the headers' partitionLeaderEpoch (-1: written unstamped)."""
    entries: list[EpochEntry] = []
    for header in headers:
        epoch = header.partition_leader_epoch
        if epoch >= 0 and (not entries or epoch > entries[-1].epoch):
            entries.append(EpochEntry(epoch, header.base_offset))
    return entries


def _check_ordered(entries: list[EpochEntry]) -> None:
    for before, after in pairwise(entries):
        assert before.epoch < after.epoch, f"epochs out of order: {before} then {after}"
        assert before.start_offset <= after.start_offset, f"offsets back: {before} then {after}"
