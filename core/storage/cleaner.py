"""Log compaction (cleanup.policy=compact): Kafka's log cleaner, as pure code over one Log.

A pass has three steps, so the daemon can run the heavy middle one off its event loop:

1. `plan_cleaning` (cheap, headers only): the cleanable segments are the sealed ones wholly below
   the recovery point, the high watermark (a value above it may still be truncated away, and the
   older value it replaced must not be gone by then) and the first segment younger than
   min.compaction.lag.ms. The pass goes ahead when their dirty bytes (from the first dirty
   offset, where the last pass ended) reach min.cleanable.dirty.ratio of their bytes.
2. `build_cleaned_segments` (reads the old segments, writes new files): maps every key to its
   latest offset over all cleanable segments, then writes `.cleaned` segments, each replacing a
   run of old ones (Kafka's grouping, up to about segment.bytes). A record survives if it is its
   key's latest (tombstones only until delete.retention.ms has passed) or has no key. Batches
   keep their offsets: an untouched batch is copied byte for byte, a thinned one is rebuilt with
   its baseOffset, lastOffsetDelta and producer fields (records.rebuild_batch), an emptied one is
   kept as a bare header only if it is its producer's last (so idempotence state read back from
   the log survives, as Kafka keeps it).
   Unlike Kafka, removed batches leave no gap: each run of them becomes one empty "filler" batch
   covering their offsets (61 bytes, no producer). Offsets stay contiguous, which segment
   recovery relies on to catch a damaged baseOffset (not CRC-covered), and which followers and
   consumers need (librdkafka moves past an empty batch by its lastOffsetDelta; a fetch that
   finds no record at all makes it double its fetch size, so a group ends on a batch with records
   where it can).
3. `Log.replace_segments` swaps them in (crash-safe, see there).

Transactions, as Kafka's cleaner treats them: the caller cleans only below the last stable
offset, so every transactional batch there belongs to a decided transaction. A committed
transaction's records are compacted as any others; an aborted one's are removed (the aborted
transactions come from the segments' `.txnindex`, taken with the plan); markers are kept whole
(they are small, and a reader needs one to end what an aborted entry starts). Records without a
key cannot be compacted and stay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from rlog.core.limits import LOG_RECOVERY_READ_BYTES, LOG_SEGMENT_BYTES_MAX
from rlog.core.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    CorruptRecordError,
    Record,
    UnsupportedCompressionError,
    decode_batch,
    read_header,
    rebuild_batch,
)
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import FileSystem
from rlog.core.storage.loader import CLEANED_SUFFIX
from rlog.core.storage.log import Log, StaleCleaningError
from rlog.core.storage.segment import LogSegment
from rlog.core.storage.txn_index import AbortedTxn

# The cleaner buffers this many bytes of output before one append to the new segment.
_WRITE_CHUNK_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class CleaningPlan:
    segments: tuple[LogSegment, ...]  # the cleanable sealed segments, oldest first
    sizes: tuple[int, ...]  # their sizes when planned: the bytes the pass reads
    first_dirty_offset: int  # where the dirty part starts (the previous pass's end)
    end_offset: int  # the first offset this pass does not clean; the next first dirty offset
    dirty_ratio: float
    truncations: int  # log.truncations when planned: a truncation since voids the pass
    # The aborted transactions that may have records in the planned segments (their markers
    # may be in later segments); every transactional batch below `end_offset` is decided.
    aborted: tuple[AbortedTxn, ...] = ()


@dataclass(frozen=True, slots=True)
class CleanedSegments:
    plan: CleaningPlan
    segments: list[LogSegment]  # covering the planned ones, `.cleaned` files, fsync'd
    records_removed: int
    bytes_before: int
    bytes_after: int


def cleanable_end_offset(log: Log, now_ms: int, high_watermark: int) -> int:
    """The first offset the cleaner may not touch, at a segment boundary or above."""
    end = min(log.active_segment.base_offset, log.recovery_point, high_watermark)
    lag_ms = log.config.min_compaction_lag_ms
    if lag_ms > 0:
        for segment in log.segments[:-1]:
            if segment.base_offset >= end:
                break
            if _segment_time_ms(segment, now_ms) > now_ms - lag_ms:
                return min(end, segment.base_offset)
    return end


def plan_cleaning(
    log: Log,
    now_ms: int,
    *,
    first_dirty_offset: int,
    high_watermark: int,
) -> CleaningPlan | None:
    """The next pass over `log`, or None when nothing is cleanable or not dirty enough."""
    end = cleanable_end_offset(log, now_ms, high_watermark)
    # A run of sealed segments: those past the log start (a suffix) and below `end` (a prefix).
    segments = tuple(
        segment
        for segment in log.segments[:-1]
        if log.log_start_offset < segment.next_offset <= end
    )
    if not segments:
        return None
    dirty_start = max(first_dirty_offset, log.log_start_offset)
    total_bytes = sum(segment.size for segment in segments)
    clean_bytes = sum(segment.size for segment in segments if segment.next_offset <= dirty_start)
    dirty_ratio = (total_bytes - clean_bytes) / total_bytes if total_bytes else 0.0
    if clean_bytes == total_bytes or dirty_ratio < log.config.min_cleanable_dirty_ratio:
        return None
    end_offset = segments[-1].next_offset
    return CleaningPlan(
        segments=segments,
        sizes=tuple(segment.size for segment in segments),
        first_dirty_offset=dirty_start,
        end_offset=end_offset,
        dirty_ratio=dirty_ratio,
        truncations=log.truncations,
        aborted=tuple(
            entry
            for segment in log.segments
            if segment.next_offset > segments[0].base_offset
            for entry in segment.txn_index.entries
            if entry.first_offset < end_offset
        ),
    )


def build_cleaned_segments(
    fs: FileSystem, dir_path: str, config: LogConfig, plan: CleaningPlan, now_ms: int
) -> CleanedSegments:
    """Write the cleaned copy of the planned segments; touches only those segments' bytes (as
    planned) and the new files, so it may run beside appends to the active segment.

    Raises CorruptRecordError on a damaged batch and OSError from the disk; either way the new
    files are removed first.
    """
    aborted = _AbortedRanges(plan.aborted)
    latest, last_batch_of_producer = _build_offset_map(plan, aborted)
    writer = _GroupWriter(fs, dir_path, config, now_ms)
    removed = 0
    try:
        segments = list(zip(plan.segments, plan.sizes, strict=True))
        for index, (segment, size) in enumerate(segments):
            following = segments[index + 1] if index + 1 < len(segments) else None
            # Tombstones go once their segment's newest data is older than delete.retention.ms
            # (the "largest timestamp" rule; Kafka counts from the pass that first cleaned them).
            keep_tombstones = (
                _segment_time_ms(segment, now_ms) >= now_ms - config.delete_retention_ms
            )

            def survives(record: Record, keep_tombstones: bool = keep_tombstones) -> bool:
                if record.key is None:
                    return True
                return latest.get(record.key) == record.offset and (
                    record.value is not None or keep_tombstones
                )

            writer.begin(segment)
            writer.carry_aborted_txns(segment)
            data: bytes | None = None
            for header, batch in _iter_batches(segment, size):
                producer_last = last_batch_of_producer.get(header.producer_id) == header.base_offset
                keeps = _nothing if aborted.holds(header) else survives
                data, dropped = _clean_batch(header, batch, keeps, keep_empty=producer_last)
                removed += dropped
                if data is None:
                    writer.drop(header)
                else:
                    writer.write(data)
            # A group may end at this segment's end only on a batch with records, unless the end
            # of the plan or a limit forces it (then it may end on a filler).
            if writer.must_close(following) or (
                _has_records(data) and writer.should_close(following)
            ):
                writer.close_group()
    except BaseException:
        writer.discard()
        raise
    return CleanedSegments(
        plan=plan,
        segments=writer.groups,
        records_removed=removed,
        bytes_before=sum(plan.sizes),
        bytes_after=sum(segment.size for segment in writer.groups),
    )


def clean_log(
    log: Log, now_ms: int, *, first_dirty_offset: int, high_watermark: int
) -> CleanedSegments | None:
    """One whole pass in one call (tests and simple callers): plan, build, swap."""
    plan = plan_cleaning(
        log, now_ms, first_dirty_offset=first_dirty_offset, high_watermark=high_watermark
    )
    if plan is None:
        return None
    cleaned = build_cleaned_segments(log.fs, log.dir_path, log.config, plan, now_ms)
    install_cleaned_segments(log, cleaned)
    return cleaned


def install_cleaned_segments(log: Log, cleaned: CleanedSegments) -> None:
    """Swap the cleaned segments in; on StaleCleaningError (the log changed meanwhile) the new
    files are removed and the error propagates.
    """
    try:
        log.replace_segments(
            cleaned.plan.segments, cleaned.segments, truncations=cleaned.plan.truncations
        )
    except StaleCleaningError:
        for segment in cleaned.segments:
            segment.delete()
        raise


# ---- the two passes over the planned segments ----


def _compactable(header: BatchHeader) -> bool:
    return not header.is_control


def _nothing(record: Record) -> bool:
    return False


class _AbortedRanges:
    """Which transactional batches belong to an aborted transaction: per producer, the offset
    ranges from a transaction's first offset to its ABORT marker."""

    def __init__(self, aborted: tuple[AbortedTxn, ...]) -> None:
        self._ranges: dict[int, list[tuple[int, int]]] = {}
        for entry in aborted:
            ranges = self._ranges.setdefault(entry.producer_id, [])
            ranges.append((entry.first_offset, entry.last_offset))

    def holds(self, header: BatchHeader) -> bool:
        if not header.is_transactional or header.is_control:
            return False
        return any(
            first <= header.base_offset <= last
            for first, last in self._ranges.get(header.producer_id, ())
        )


def _decoded(header: BatchHeader, batch: bytes) -> list[Record] | None:
    """The batch's records, or None when it cannot be compacted (kept whole)."""
    if not _compactable(header):
        return None
    try:
        return decode_batch(batch)
    except UnsupportedCompressionError:
        return None  # a codec this process lacks: kept as it is, left out of the map


def _build_offset_map(
    plan: CleaningPlan, aborted: _AbortedRanges
) -> tuple[dict[bytes, int], dict[int, int]]:
    """key -> its latest offset in the planned segments (aborted records do not count), and
    producer id -> base offset of its last batch there.
    """
    latest: dict[bytes, int] = {}
    last_batch_of_producer: dict[int, int] = {}
    for segment, size in zip(plan.segments, plan.sizes, strict=True):
        for header, batch in _iter_batches(segment, size):
            if header.producer_id >= 0:
                last_batch_of_producer[header.producer_id] = header.base_offset
            if aborted.holds(header):
                continue
            for record in _decoded(header, batch) or ():
                if record.key is not None:
                    latest[record.key] = record.offset
    return latest, last_batch_of_producer


def _clean_batch(
    header: BatchHeader, batch: bytes, survives: Callable[[Record], bool], *, keep_empty: bool
) -> tuple[bytes | None, int]:
    """(the batch to write, or None to drop it; records removed)."""
    records = _decoded(header, batch)
    if records is None:
        return batch, 0
    kept = [record for record in records if survives(record)]
    removed = len(records) - len(kept)
    if not kept and not keep_empty:
        return None, removed
    if len(kept) == len(records):
        return batch, 0  # untouched: byte for byte
    return rebuild_batch(header, kept), removed


def _has_records(data: bytes | None) -> bool:
    return data is not None and read_header(data).records_count > 0


class _GroupWriter:
    """Writes cleaned batches into new segments, each covering a run of old segments ("groups",
    as Kafka's cleaner makes them) up to about segment.bytes, so cleaned logs do not keep many
    tiny segments.
    """

    def __init__(self, fs: FileSystem, dir_path: str, config: LogConfig, now_ms: int) -> None:
        self._fs = fs
        self._dir_path = dir_path
        self._config = config
        self._now_ms = now_ms
        self.groups: list[LogSegment] = []
        self._current: LogSegment | None = None
        self._out = bytearray()
        self._out_headers: list[BatchHeader] = []
        self._removed: list[BatchHeader] = []  # the run of removed batches not yet covered

    def begin(self, segment: LogSegment) -> None:
        """Start a group at `segment` unless one is open."""
        if self._current is None:
            self._current = LogSegment.create(
                self._fs,
                self._dir_path,
                segment.base_offset,
                self._config,
                swap_suffix=CLEANED_SUFFIX,
            )
            self._current.roll_base_ms = segment.roll_base_ms  # its age for segment.ms stays
            self.groups.append(self._current)

    def carry_aborted_txns(self, segment: LogSegment) -> None:
        """The old segment's aborted transactions move to the new one (markers are kept)."""
        assert self._current is not None
        for entry in list(segment.txn_index.entries):
            self._current.txn_index.append(entry)

    @property
    def _bytes(self) -> int:
        assert self._current is not None
        return self._current.size + len(self._out)

    def should_close(self, following: tuple[LogSegment, int] | None) -> bool:
        """The next old segment (at its old size, an upper bound) would not fit segment.bytes."""
        return following is None or self._bytes + following[1] > self._config.segment_bytes

    def must_close(self, following: tuple[LogSegment, int] | None) -> bool:
        """The end of the plan, or the next segment would break a segment's hard limits."""
        if following is None:
            return True
        assert self._current is not None
        next_segment, next_size = following
        return self._bytes + next_size > LOG_SEGMENT_BYTES_MAX or not self._current.can_index(
            next_segment.next_offset - 1
        )

    def write(self, data: bytes) -> None:
        self._write_filler()
        self._out += data
        self._out_headers.append(read_header(data))
        if len(self._out) >= _WRITE_CHUNK_BYTES:
            self._append()

    def drop(self, header: BatchHeader) -> None:
        """Remove this batch: its offsets join the run the next filler batch covers. A run
        stays within one leader epoch, so the epochs batches carry still say where each began.
        """
        if self._removed and self._removed[0].partition_leader_epoch != (
            header.partition_leader_epoch
        ):
            self._write_filler()
        self._removed.append(header)

    def _write_filler(self) -> None:
        """One empty batch over the run of removed batches: no records, no producer."""
        if not self._removed:
            return
        first, last = self._removed[0], self._removed[-1]
        cover = first._replace(
            attributes=0,
            last_offset_delta=last.last_offset - first.base_offset,
            max_timestamp=max(header.max_timestamp for header in self._removed),
            producer_id=-1,
            producer_epoch=-1,
            base_sequence=-1,
        )
        self._removed = []
        self.write(rebuild_batch(cover, []))

    def _append(self) -> None:
        if self._out_headers:
            assert self._current is not None
            self._current.append(self._out, self._out_headers, self._now_ms)
            self._out, self._out_headers = bytearray(), []

    def close_group(self) -> None:
        assert self._current is not None
        self._write_filler()
        self._append()
        self._current.flush()
        self._current = None

    def discard(self) -> None:
        for segment in self.groups:
            segment.delete()


def _iter_batches(segment: LogSegment, size: int) -> Iterator[tuple[BatchHeader, bytes]]:
    """(header, bytes) of each batch in the segment's first `size` bytes, read in large chunks."""
    log_file = segment.log_file
    position = 0
    chunk, chunk_start = b"", 0
    while position < size:
        if position + BATCH_HEADER_SIZE > chunk_start + len(chunk):
            chunk = log_file.read(position, min(LOG_RECOVERY_READ_BYTES, size - position))
            chunk_start = position
        header = read_header(chunk, position - chunk_start)
        end = position + header.size
        if end > chunk_start + len(chunk):
            read_bytes = min(max(header.size, LOG_RECOVERY_READ_BYTES), size - position)
            chunk, chunk_start = log_file.read(position, read_bytes), position
        if end > chunk_start + len(chunk):
            raise CorruptRecordError(f"{segment}: batch at {position} runs past the end: {header}")
        offset = position - chunk_start
        yield header, bytes(chunk[offset : offset + header.size])
        position = end


def _segment_time_ms(segment: LogSegment, now_ms: int) -> int:
    """The segment's age for delete.retention.ms and min.compaction.lag.ms: its largest
    timestamp, else when it began filling (as retention.ms measures it).
    """
    if segment.largest_timestamp >= 0:
        return segment.largest_timestamp
    return segment.roll_base_ms if segment.roll_base_ms is not None else now_ms
