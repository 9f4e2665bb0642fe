"""One partition's log: ordered segments, offset assignment, rolling, reads, flushes, retention.

Offsets: `log_start_offset` <= `recovery_point` <= `log_end_offset` (LEO, the next offset to
assign). Everything below the recovery point has been fsync'd; startup re-checks only what is
above it (loader.py).

The log also keeps the partition's producer state (`producers`), as Kafka's log does: every batch
appended, as leader or follower, updates it; a transaction's ABORT marker adds an entry to its
segment's aborted-transaction index. It is snapshotted at each segment roll and at a clean close
(producer_snapshot.py) and rebuilt on load and after a truncation from the latest snapshot at or
below the point the log is known good to, plus the batches after it.
"""

from __future__ import annotations

import contextlib
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from itertools import pairwise

from rlog.core.producer_state import (
    CompletedTxn,
    Marker,
    ProducerStateCopy,
    ProducerStateManager,
)
from rlog.core.records import (
    BatchHeader,
    Compression,
    CorruptRecordError,
    InvalidRecordError,
    decode_batch,
    iter_batches,
    patch_base_offset,
    patch_leader_epoch,
    read_end_txn_marker,
    read_header,
    set_log_append_time,
    set_max_timestamp,
)
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import Buffer, FileSlice, FileSystem
from rlog.core.storage.loader import SWAP_SUFFIX, RecoverySummary, load_log
from rlog.core.storage.producer_snapshot import (
    CorruptSnapshotError,
    list_snapshots,
    read_snapshot,
    snapshot_path,
    write_snapshot,
)
from rlog.core.storage.segment import LogSegment
from rlog.core.storage.txn_index import AbortedTxn
from rlog.core.values import value

PRODUCER_MARK_BATCHES = 1024  # batches appended between in-memory copies of the producer state
PRODUCER_MARK_BATCHES_PER_PRODUCER = 4
PRODUCER_MARKS_KEPT = 4  # copies kept: a truncation deeper than these replays from disk


class OffsetOutOfRangeError(Exception):
    """A fetch or a log-start move asks for an offset outside [log start, LEO]."""


class RecordTooLargeError(Exception):
    """A batch is larger than max.message.bytes (Kafka's MESSAGE_TOO_LARGE)."""


class OffsetOutOfOrderError(Exception):
    """Batches appended as they are (a follower's) do not continue from the LEO."""


class StaleCleaningError(Exception):
    """The segments a cleaning pass rewrote changed meanwhile (retention, truncation)."""


@value
class AppendInfo:
    first_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time_ms: int  # -1 unless the log stamped LogAppendTime
    num_messages: int
    num_batches: int
    headers: list[BatchHeader]  # as written: offsets, epoch and timestamps patched


@value
class FetchSliceInfo:
    fetch_offset: int
    records: FileSlice | None  # None: nothing to return (at the LEO, or nothing below the limit)

    @property
    def size_bytes(self) -> int:
        return self.records.size if self.records is not None else 0


class Log:
    def __init__(
        self,
        dir_path: str,
        config: LogConfig,
        fs: FileSystem,
        *,
        recovery_point: int,
        log_start_offset: int,
        now_ms: int,
    ) -> None:
        self.dir_path = dir_path
        self._config = config
        self._fs = fs
        loaded = load_log(
            fs,
            dir_path,
            config,
            recovery_point=recovery_point,
            log_start_offset=log_start_offset,
            now_ms=now_ms,
        )
        self._segments = loaded.segments
        for segment in self._segments[:-1]:
            segment.forget_tail()
        self._recovery_point = loaded.recovery_point
        self._log_start_offset = loaded.log_start_offset
        self.recovery_summary: RecoverySummary = loaded.summary
        # When the oldest unflushed message arrived (flush.ms counts from it); after a restart the
        # unflushed tail is as old as the restart, as far as we know.
        self._first_unflushed_ms = now_ms
        # Segment files created since the last flush: their names need a directory fsync.
        self._dir_needs_sync = True
        # Counts truncations, so a cleaning pass planned before one knows its work is stale.
        self._truncations = 0
        self.producers = ProducerStateManager()
        # Where the last rebuild of the producer state began replaying the log.
        self.producer_replay_start = 0
        # In-memory copies of the producer state at recent offsets (oldest first), so that
        # cutting a follower's divergent tail replays a few batches, not the whole active
        # segment since its last snapshot on disk (tens of thousands of small batches).
        self._producer_marks: list[ProducerStateCopy] = []
        self._batches_since_mark = 0
        lost = [s.base_offset for s in self._segments if s.txn_index_lost]
        self.reload_producer_state(min([recovery_point, self.log_end_offset, *lost]))

    # ---- state ----

    @property
    def config(self) -> LogConfig:
        return self._config

    def update_config(self, config: LogConfig) -> None:
        self._config = config
        for segment in self._segments:
            segment.config = config

    @property
    def fs(self) -> FileSystem:
        return self._fs

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def unflushed_messages(self) -> int:
        return self.log_end_offset - self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(segment.size for segment in self._segments)

    @property
    def segments(self) -> tuple[LogSegment, ...]:
        return tuple(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def truncations(self) -> int:
        return self._truncations

    # ---- appending ----

    def append(
        self,
        records: Buffer,
        now_ms: int,
        *,
        leader_epoch: int | None = None,
        assign_offsets: bool = True,
        max_timestamp: int | None = None,
        batches: Sequence[tuple[int, BatchHeader]] | None = None,
    ) -> AppendInfo:
        """Validate and write all batches in `records` with one file append.

        As leader (`assign_offsets`), batches get offsets from the LEO and, if the topic says so,
        LogAppendTime; as follower they must already continue from the LEO. `leader_epoch`, if
        given, is stamped on every batch. `max_timestamp`, for one CREATE_TIME batch, replaces a
        maxTimestamp its records disagree with (found by the leader's record walk). Raises
        CorruptRecordError (nothing written), RecordTooLargeError, OffsetOutOfOrderError, or
        OSError from the disk (nothing written). `batches`: the (position, header) of every
        batch in `records` as iter_batches gave them, when the caller validated them already.
        """
        batches = list(iter_batches(records) if batches is None else batches)
        if not batches:
            raise InvalidRecordError("no record batches to append")
        assert max_timestamp is None or len(batches) == 1, "max_timestamp is for one batch"
        headers = [header for _, header in batches]
        if assign_offsets:
            for header in headers:
                self._check_producer_batch(header)
        else:
            self._check_follows_on(headers)
        stamp_time = assign_offsets and self._config.log_append_time
        data: Buffer = records
        if assign_offsets or leader_epoch is not None:
            data = bytearray(records)  # the one copy, patched in place
            next_offset = self.log_end_offset
            for position, header in batches:
                if assign_offsets:
                    patch_base_offset(data, position, next_offset)
                    next_offset += header.last_offset_delta + 1
                if leader_epoch is not None:
                    patch_leader_epoch(data, position, leader_epoch)
                if stamp_time:
                    set_log_append_time(data, position, now_ms)
                elif max_timestamp is not None and max_timestamp != header.max_timestamp:
                    set_max_timestamp(data, position, max_timestamp)
            headers = [read_header(data, position) for position, _ in batches]
        self._write(data, headers, now_ms)
        self._apply_to_producers(data, batches, headers, self.active_segment)
        self._batches_since_mark += len(headers)
        due = max(PRODUCER_MARK_BATCHES, PRODUCER_MARK_BATCHES_PER_PRODUCER * len(self.producers))
        if self._batches_since_mark >= due:
            self._mark_producer_state()
        return _append_info(headers, now_ms if stamp_time else -1)

    def _mark_producer_state(self) -> None:
        # Every PRODUCER_MARK_BATCHES batches at least, and never more often than one entry
        # copied per PRODUCER_MARK_BATCHES_PER_PRODUCER batches: the copies cost per producer.
        self._batches_since_mark = 0
        if self.producers.end_offset == self.log_end_offset:
            self._producer_marks.append(self.producers.copy_state())
            del self._producer_marks[:-PRODUCER_MARKS_KEPT]

    def _apply_to_producers(
        self,
        data: Buffer,
        batches: list[tuple[int, BatchHeader]],
        headers: list[BatchHeader],
        segment: LogSegment,
    ) -> None:
        """The written batches' effect on the producer state; aborts go to the txn index."""
        for (position, _), header in zip(batches, headers, strict=True):
            marker = _marker(data, position) if header.is_control else None
            completed = self.producers.update(header, header.base_offset, marker)
            if completed is not None and completed.aborted:
                self._index_abort(segment, completed)

    def _index_abort(self, segment: LogSegment, completed: CompletedTxn) -> None:
        stable = self.producers.last_stable_offset_after(completed)
        segment.txn_index.append(
            AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, stable)
        )

    def _check_producer_batch(self, header: BatchHeader) -> None:
        """Rules for new data; a follower skips them, as the leader applied them already (and a
        lowered max.message.bytes must not stop replication of older batches).
        """
        if header.size > self._config.message_max_bytes:
            raise RecordTooLargeError(
                f"batch of {header.size} bytes exceeds max.message.bytes "
                f"{self._config.message_max_bytes}"
            )
        if header.records_count < 1 or header.records_count != header.last_offset_delta + 1:
            raise InvalidRecordError(
                f"batch declares {header.records_count} records for "
                f"{header.last_offset_delta + 1} offsets"
            )
        if header.compression > Compression.ZSTD:
            raise InvalidRecordError(f"unknown compression codec {header.compression}")

    def _check_follows_on(self, headers: list[BatchHeader]) -> None:
        expected_offset = self.log_end_offset
        for header in headers:
            if header.base_offset != expected_offset:
                raise OffsetOutOfOrderError(
                    f"batch at offset {header.base_offset}, expected {expected_offset}"
                )
            expected_offset = header.next_offset

    def _write(self, data: Buffer, headers: list[BatchHeader], now_ms: int) -> None:
        if self._should_roll(len(data), headers[-1].last_offset, now_ms):
            self.roll()
        if self.unflushed_messages == 0:
            self._first_unflushed_ms = now_ms
        self.active_segment.append(data, headers, now_ms)

    def _should_roll(self, append_bytes: int, last_offset: int, now_ms: int) -> bool:
        active = self.active_segment
        if active.size == 0:
            return False
        roll_base_ms = active.roll_base_ms
        return (
            active.size + append_bytes > self._config.segment_bytes
            or (roll_base_ms is not None and now_ms - roll_base_ms > self._config.segment_ms)
            or active.is_index_full
            or not active.can_index(last_offset)
        )

    def roll(self) -> LogSegment:
        """Start a new active segment at the LEO (unless the active one is still empty)."""
        if self.active_segment.size == 0:
            return self.active_segment
        self._take_producer_snapshot()
        segment = LogSegment.create(self._fs, self.dir_path, self.log_end_offset, self._config)
        self.active_segment.forget_tail()
        self._segments.append(segment)
        self._dir_needs_sync = True
        return segment

    # ---- reading ----

    def read(
        self,
        offset: int,
        max_bytes: int,
        max_offset_exclusive: int,
        min_one_batch: bool = True,
    ) -> FetchSliceInfo:
        """Whole batches from the one holding `offset`, all ending below `max_offset_exclusive`
        (the high watermark for consumers, the LEO for followers), from one segment.
        """
        log_end_offset = self.log_end_offset
        if not self._log_start_offset <= offset <= log_end_offset:
            raise OffsetOutOfRangeError(
                f"offset {offset} is outside [{self._log_start_offset}, {log_end_offset}]"
            )
        if offset == log_end_offset:  # a caught-up reader: nothing to look up
            return FetchSliceInfo(offset, None)
        index = bisect_right(self._segments, offset, key=lambda segment: segment.base_offset) - 1
        for segment in self._segments[index:]:
            if segment.next_offset > offset:  # skips only segments with nothing at or after it
                found = segment.read(offset, max_bytes, max_offset_exclusive, min_one_batch)
                return FetchSliceInfo(offset, found)
        return FetchSliceInfo(offset, None)

    def iter_batches(self, chunk_bytes: int) -> Iterator[tuple[bytes, int, BatchHeader]]:
        """(chunk, position, header) of every batch from the log start to the LEO, read
        `chunk_bytes` at a time: for coordinators replaying their partition when they load it."""
        offset = self._log_start_offset
        end = self.log_end_offset
        while offset < end:
            found = self.read(offset, chunk_bytes, end).records
            if found is None:
                return
            data = found.read()
            for position, header in iter_batches(data):
                offset = header.last_offset + 1
                yield data, position, header

    def iter_batch_headers(self, start_offset: int | None = None) -> Iterator[BatchHeader]:
        """Headers of every batch from the log start (or from the batch holding `start_offset`),
        oldest first, reading 61 bytes per batch: for startup rebuilds such as producer state.
        The log must not change while this runs.
        """
        offset = self._log_start_offset if start_offset is None else start_offset
        offset = max(offset, self._log_start_offset)
        for segment in self._segments:
            if segment.next_offset > offset:
                yield from segment.headers_from(offset)

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with a timestamp >= `timestamp`, if any."""
        for segment in self._segments:
            if segment.next_offset <= self._log_start_offset:
                continue
            found = segment.find_offset_for_timestamp(timestamp, self._log_start_offset)
            if found is not None:
                return found
        return None

    # ---- durability ----

    def flush_due(self, now_ms: int) -> bool:
        """Whether flush.messages or flush.ms asks for an fsync now."""
        unflushed = self.unflushed_messages
        return unflushed > 0 and (
            unflushed >= self._config.flush_messages
            or now_ms - self._first_unflushed_ms >= self._config.flush_ms
        )

    @property
    def has_unflushed_sealed_segments(self) -> bool:
        """Rolled segments hold unflushed data (a periodic flush should take them)."""
        return self._recovery_point < self.active_segment.base_offset

    def flush(self, up_to_offset: int | None = None) -> None:
        """fsync everything below `up_to_offset` (default: the LEO) and move the recovery point.

        On an fsync error the recovery point stays where it was and the error propagates.
        """
        target = self.log_end_offset if up_to_offset is None else up_to_offset
        target = min(target, self.log_end_offset)
        if target <= self._recovery_point:
            return
        for segment in self._segments:
            if segment.base_offset < target and segment.next_offset > self._recovery_point:
                segment.flush()
        if self._dir_needs_sync:
            self._fs.sync_dir(self.dir_path)
            self._dir_needs_sync = False
        self._recovery_point = target

    # ---- compaction ----

    def replace_segments(
        self, old: Sequence[LogSegment], new: Sequence[LogSegment], *, truncations: int
    ) -> None:
        """Swap in the log cleaner's segments (cleaner.py): `old` is a run of sealed segments,
        `new` covers the same offsets, each new segment replacing the old ones from its base
        offset to the next new one's; files written under the `.cleaned` suffix and fsync'd.

        Crash-safe as Kafka's swap: every new file goes `.cleaned` -> `.swap` (the `.log.swap`
        rename commits a segment; loader.py finishes committed swaps, removing the old segments
        inside their range, and drops the rest), then the old segments inside its range are
        deleted, then it takes its live names, replacing its base's old files in one rename.
        Offsets, the log start and the recovery point do not change. StaleCleaningError (nothing
        renamed) if `old` is no longer what this log holds, or it was truncated since
        `truncations` was read.
        """
        if truncations != self._truncations:
            raise StaleCleaningError(f"{self}: truncated while being cleaned")
        first = next((i for i, s in enumerate(self._segments) if s is old[0]), None)
        if first is None or first + len(old) >= len(self._segments):
            raise StaleCleaningError(f"{old[0]} is no longer a sealed segment of {self}")
        if any(a is not b for a, b in zip(old, self._segments[first:], strict=False)):
            raise StaleCleaningError(f"segments of {self} changed while being cleaned")
        _check_covers(old, new)
        try:
            for new_segment in new:
                new_segment.rename_files(SWAP_SUFFIX)
            self._fs.sync_dir(self.dir_path)  # the commit point of every segment in `new`
        except OSError:
            # Not committed in memory: drop the new files, or a restart would finish their swap.
            for new_segment in new:
                new_segment.delete()
            raise
        new_bases = {segment.base_offset for segment in new}
        try:
            for old_segment in old:
                if old_segment.base_offset not in new_bases:
                    old_segment.delete()  # inside a new segment's range, before it goes live
            self._fs.sync_dir(self.dir_path)  # no new segment may be seen overlapping an old one
            for new_segment in new:
                new_segment.rename_files("")
            self._fs.sync_dir(self.dir_path)
        finally:
            # Committed: from here the new segments are the log's, even if a step above failed
            # (a restart finishes what is left: loader.py).
            for new_segment in new:
                new_segment.config = self._config
                new_segment.forget_tail()  # sealed: only the active segment keeps one
            for old_segment in old:
                if old_segment.base_offset in new_bases:
                    old_segment.release()
            self._segments[first : first + len(old)] = new

    # ---- producer state ----

    def _take_producer_snapshot(self) -> None:
        """Snapshot the producer state at the LEO. Best effort: a missing or torn snapshot only
        makes the next rebuild replay more of the log."""
        if self.producers.end_offset != self.log_end_offset:
            return
        with contextlib.suppress(OSError):
            write_snapshot(self._fs, self.dir_path, self.log_end_offset, self.producers.entries)

    def reload_producer_state(self, good_to: int) -> None:
        """Rebuild the producer state (and the aborted-transaction index) from the latest
        snapshot at or below `good_to`, replaying the batches after it. Snapshots past the LEO
        are deleted (their offsets are no longer this log's)."""
        start = None
        mark = self._producer_mark_at_or_below(good_to)
        for offset in reversed(list_snapshots(self._fs, self.dir_path)):
            if offset > self.log_end_offset or offset < self._segments[0].base_offset:
                self._remove_snapshot(offset)
            elif start is None and offset <= good_to and (mark is None or offset > mark.end_offset):
                try:
                    entries = read_snapshot(self._fs, self.dir_path, offset)
                except CorruptSnapshotError:
                    self._remove_snapshot(offset)
                    continue
                self.producers.load(entries, offset)
                start = offset
        if start is None and mark is not None:
            self.producers.restore(mark)
            start = mark.end_offset
        if start is None:
            start = self._log_start_offset
            self.producers.clear(start)
        self.producer_replay_start = start
        for segment in self._segments:
            if segment.next_offset > start:
                if segment.base_offset >= start:
                    segment.txn_index.reset()
                else:
                    segment.txn_index.truncate_to(start)
                self._replay_into_producers(segment, start)

    def _producer_mark_at_or_below(self, offset: int) -> ProducerStateCopy | None:
        """The latest in-memory copy at or below `offset` still inside the log."""
        floor = self._segments[0].base_offset
        usable = [m for m in self._producer_marks if floor <= m.end_offset <= offset]
        return usable[-1] if usable else None

    def _replay_into_producers(self, segment: LogSegment, start: int) -> None:
        for position, header in segment.batches_from(start):
            if header.base_offset < start:
                continue  # the snapshot has it
            marker = None
            if header.is_control:
                marker = _marker(segment.read_batch(position, header), 0)
            completed = self.producers.update(header, header.base_offset, marker)
            if completed is not None and completed.aborted:
                self._index_abort(segment, completed)
        self.producers.end_offset = segment.next_offset

    def _remove_snapshot(self, offset: int) -> None:
        path = snapshot_path(self.dir_path, offset)
        if self._fs.exists(path):
            self._fs.remove(path)

    def aborted_transactions(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping [fetch_offset, upper_bound), for read_committed
        fetches. Each is indexed in the segment of its marker, at or after `fetch_offset`, but
        its marker may lie past `upper_bound`: the search goes on until an entry's LSO reaches
        `upper_bound` (every transaction still open then began at or after it), as Kafka's."""
        found: list[AbortedTxn] = []
        index = bisect_right(self._segments, fetch_offset, key=lambda s: s.base_offset) - 1
        for segment in self._segments[max(index, 0) :]:
            for entry in segment.txn_index.entries:
                if entry.last_offset >= fetch_offset and entry.first_offset < upper_bound:
                    found.append(entry)
                if entry.last_stable_offset >= upper_bound:
                    return found
        return found

    # ---- retention and truncation ----

    def delete_retained_segments(self, now_ms: int, high_watermark: int | None = None) -> int:
        """Delete the oldest whole segments that retention.ms or retention.bytes (when the policy
        deletes) or the log start offset no longer keep; never the active one, and, as Kafka,
        never one holding offsets at or above `high_watermark` (records not yet replicated to
        the ISR, which an acks=all producer still waits for). Returns how many.
        """
        config = self._config
        cutoff_ms = now_ms - config.retention_ms

        def expired(segment: LogSegment, bytes_left: int) -> bool:
            if segment.next_offset <= self._log_start_offset:
                return True
            if high_watermark is not None and segment.next_offset > high_watermark:
                return False
            if not config.deletes_by_retention:
                return False
            if config.retention_bytes >= 0 and bytes_left - segment.size >= config.retention_bytes:
                return True
            return config.retention_ms >= 0 and _retention_timestamp(segment, now_ms) < cutoff_ms

        return self._delete_oldest_while(expired)

    def advance_log_start_offset(self, offset: int) -> None:
        """Move the log start forward (DeleteRecords); segments wholly below it are deleted."""
        if offset > self.log_end_offset:
            raise OffsetOutOfRangeError(f"offset {offset} is past the LEO {self.log_end_offset}")
        if offset <= self._log_start_offset:
            return
        self._log_start_offset = offset
        self._recovery_point = max(self._recovery_point, offset)
        self._delete_oldest_while(lambda segment, _: segment.next_offset <= offset)

    def _delete_oldest_while(self, should_delete: Callable[[LogSegment, int], bool]) -> int:
        """Delete sealed segments from the oldest while should_delete(segment, bytes left)."""
        bytes_left = self.size_bytes
        count = 0
        for segment in self._segments[:-1]:
            if not should_delete(segment, bytes_left):
                break
            bytes_left -= segment.size
            count += 1
        if count:
            doomed = self._segments[:count]
            del self._segments[:count]
            self._log_start_offset = max(self._log_start_offset, self._segments[0].base_offset)
            self._recovery_point = max(self._recovery_point, self._log_start_offset)
            for segment in doomed:
                segment.delete()
            for offset in list_snapshots(self._fs, self.dir_path):
                if offset < self._segments[0].base_offset:
                    self._remove_snapshot(offset)
        return count

    def truncate_to(self, offset: int) -> None:
        """Drop every batch holding an offset >= `offset` (a follower's divergent tail)."""
        if offset >= self.log_end_offset:
            return
        self._truncations += 1
        if offset < self._log_start_offset:
            self.truncate_fully_and_start_at(offset)
            return
        keep = bisect_right(self._segments, offset, key=lambda segment: segment.base_offset)
        doomed = self._segments[keep:]
        del self._segments[keep:]
        for segment in doomed:
            segment.delete()
        self.active_segment.truncate_to(offset)
        log_end_offset = self.log_end_offset
        self._recovery_point = min(self._recovery_point, log_end_offset)
        self._log_start_offset = min(self._log_start_offset, log_end_offset)
        self._forget_snapshots_from(log_end_offset + 1)
        # A copy past the new end describes batches this log no longer holds.
        self._producer_marks = [m for m in self._producer_marks if m.end_offset <= log_end_offset]
        self._batches_since_mark = 0
        self.reload_producer_state(log_end_offset)

    def _forget_snapshots_from(self, offset: int) -> None:
        """Delete the snapshots at or past `offset`, durably: one that came back after a crash
        would describe batches this log no longer holds."""
        doomed = [o for o in list_snapshots(self._fs, self.dir_path) if o >= offset]
        for snapshot in doomed:
            self._remove_snapshot(snapshot)
        if doomed:
            self._fs.sync_dir(self.dir_path)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Delete everything; the log restarts empty at `offset`."""
        self._truncations += 1
        for segment in self._segments:
            segment.delete()  # before create: the new segment may reuse a name
        self._segments = [LogSegment.create(self._fs, self.dir_path, offset, self._config)]
        self._log_start_offset = offset
        self._recovery_point = offset
        self._dir_needs_sync = True
        self._forget_snapshots_from(0)
        self._producer_marks = []
        self._batches_since_mark = 0
        self.producers.clear(offset)
        self.producer_replay_start = offset

    def close(self, *, snapshot: bool = False) -> None:
        """Close the files; flushing and checkpoints are LogManager's clean shutdown, which asks
        for a producer snapshot at the LEO too (the next start replays nothing)."""
        if snapshot:
            self._take_producer_snapshot()
        for segment in self._segments:
            segment.close()

    def __repr__(self) -> str:
        return (
            f"Log({self.dir_path!r}, log_start_offset={self._log_start_offset}, "
            f"log_end_offset={self.log_end_offset}, recovery_point={self._recovery_point})"
        )


def _marker(data: Buffer, position: int) -> Marker | None:
    """The transaction marker in the control batch at `position`; None if it is not one."""
    try:
        records = decode_batch(data, position)
        control_type, coordinator_epoch = read_end_txn_marker(records[0])
    except (CorruptRecordError, IndexError):
        return None
    return Marker(control_type, coordinator_epoch)


def _check_covers(old: Sequence[LogSegment], new: Sequence[LogSegment]) -> None:
    """`new` starts and ends where `old` does, each new segment at an old segment's base."""
    old_bases = {segment.base_offset for segment in old}
    assert new and new[0].base_offset == old[0].base_offset, (old, new)
    assert new[-1].next_offset == old[-1].next_offset, (old, new)
    assert all(segment.base_offset in old_bases for segment in new), (old, new)
    for before, after in pairwise(new):
        assert before.next_offset == after.base_offset, (old, new)


def _retention_timestamp(segment: LogSegment, now_ms: int) -> int:
    """The segment's age for retention.ms: its largest timestamp, or when it began filling."""
    if segment.largest_timestamp >= 0:
        return segment.largest_timestamp
    return segment.roll_base_ms if segment.roll_base_ms is not None else now_ms


def _append_info(headers: list[BatchHeader], log_append_time_ms: int) -> AppendInfo:
    max_timestamp, offset_of_max_timestamp = -1, headers[0].base_offset
    for header in headers:
        if header.max_timestamp > max_timestamp:
            max_timestamp, offset_of_max_timestamp = header.max_timestamp, header.last_offset
    return AppendInfo(
        first_offset=headers[0].base_offset,
        last_offset=headers[-1].last_offset,
        max_timestamp=max_timestamp,
        offset_of_max_timestamp=offset_of_max_timestamp,
        log_append_time_ms=log_append_time_ms,
        num_messages=sum(header.records_count for header in headers),
        num_batches=len(headers),
        headers=headers,
    )
