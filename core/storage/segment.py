"""One segment: a `.log` file of whole batches and its two sparse indexes, named by base offset.

Work is per batch: reads walk 61-byte headers, never records, and the headers after the last
offset-index entry stay in memory (`_Tail`), so reads near the log end read none from the file.
Batches in a segment are contiguous (each starts at the previous one's next offset) because rlog
writes no gaps; recovery relies on it to tell a stale but well-formed tail from data. (The log
cleaner keeps it so: the batches it removes leave an empty batch covering their offsets, see
cleaner.py.)
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Iterator, Sequence

from rlog.core.limits import LOG_RECOVERY_READ_BYTES
from rlog.core.records import (
    BATCH_HEADER_SIZE,
    BatchHeader,
    CorruptRecordError,
    decode_batch,
    read_header,
    validate_batch,
)
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import Buffer, FileSlice, FileSystem, LogFile
from rlog.core.storage.index import INT32_MAX, CorruptIndexError, OffsetIndex, TimeIndex
from rlog.core.storage.txn_index import CorruptTxnIndexError, TxnIndex

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
TXN_INDEX_SUFFIX = ".txnindex"
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)

# Most batch headers a segment keeps in memory. The tail is normally about index.interval.bytes
# of batches (a few dozen); the cap bounds it when no index entry comes to restart it: a full
# index, a refused index write, or a large index.interval.bytes with small batches.
TAIL_BATCHES_MAX = 4096


def segment_file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def _segment_paths(dir_path: str, base_offset: int, swap_suffix: str) -> list[str]:
    """The .log, .index and .timeindex paths, each followed by `swap_suffix`."""
    return [
        os.path.join(dir_path, segment_file_name(base_offset, suffix) + swap_suffix)
        for suffix in SEGMENT_SUFFIXES
    ]


class _Tail:
    """(position, header) of a segment's last batches, from its second-to-last offset-index entry
    (or the segment's start) to its end. Fetches at the log end land here: Kafka finds those
    headers in the page cache, but in Python each pread is a syscall plus new objects. The
    interval before the last index entry stays because a follower's next fetch often starts a
    few batches before that entry: without them, its lookup would read every header from the
    entry before on from the file.

    The lists are replaced, never cleared or cut in place, so a walk in progress keeps its view.
    """

    __slots__ = ("_interval_start", "headers", "last_offsets", "positions")

    def __init__(self) -> None:
        self.positions: list[int] = []
        self.last_offsets: list[int] = []
        self.headers: list[BatchHeader] = []
        self._interval_start = 0  # where the batches since the last index entry begin

    def add(self, position: int, header: BatchHeader, *, restart: bool) -> None:
        """The batch after the last one here; with `restart` (it got an index entry) it starts
        a new interval and the one before the last is dropped. At the cap the interval before
        the last goes first; if there is none the tail starts over. Dropping whole intervals
        rather than the oldest batch keeps appends O(1); batches before the tail are read from
        the file as before.
        """
        if restart:
            self._keep_from(self._interval_start)
            self._interval_start = len(self.positions)
        if len(self.positions) >= TAIL_BATCHES_MAX:
            self._keep_from(self._interval_start or len(self.positions))
            self._interval_start = 0
        self.positions.append(position)
        self.last_offsets.append(header.last_offset)
        self.headers.append(header)

    def _keep_from(self, index: int) -> None:
        self.positions = self.positions[index:]
        self.last_offsets = self.last_offsets[index:]
        self.headers = self.headers[index:]

    def index_of(self, position: int) -> int | None:
        """Where the batch starting at `position` is in the tail, None if it is not there."""
        positions = self.positions
        if not positions or position < positions[0]:
            return None
        index = bisect_left(positions, position)
        return index if index < len(positions) and positions[index] == position else None

    def find(self, offset: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch ending at or after `offset`, when the tail
        holds it and no batch before the tail could (`offset` is not below the tail's start).
        """
        headers = self.headers
        if not headers or offset < headers[0].base_offset:
            return None
        index = bisect_left(self.last_offsets, offset)
        return (self.positions[index], headers[index]) if index < len(headers) else None


class LogSegment:
    def __init__(
        self,
        fs: FileSystem,
        dir_path: str,
        base_offset: int,
        config: LogConfig,
        *,
        create: bool,
        swap_suffix: str = "",
    ) -> None:
        self._fs = fs
        self._dir_path = dir_path
        self._paths = _segment_paths(dir_path, base_offset, swap_suffix)
        log_path, index_path, time_index_path = self._paths
        self.base_offset = base_offset
        self._config = config
        self._log = fs.open(log_path, create=create)
        self._offset_index = OffsetIndex(
            fs.open(index_path, create=True), base_offset, config.offset_index_entries_max
        )
        self._time_index = TimeIndex(
            fs.open(time_index_path, create=True), base_offset, config.time_index_entries_max
        )
        txn_path = os.path.join(dir_path, segment_file_name(base_offset, TXN_INDEX_SUFFIX))
        # Aborted transactions whose marker is here. Unreadable: empty, and `txn_index_lost`
        # tells the log to rebuild it from the records (producer state replay).
        self.txn_index_lost = False
        try:
            self.txn_index = TxnIndex(fs, txn_path + swap_suffix, load=not create)
        except CorruptTxnIndexError:
            self.txn_index = TxnIndex(fs, txn_path + swap_suffix, load=False)
            self.txn_index_lost = True
        # The offset the next batch appended here would get (this segment's end). Only the
        # segment sets it; a plain attribute, as the log end is read many times per request.
        self.next_offset = base_offset
        self._max_timestamp = -1
        self._offset_of_max_timestamp = base_offset
        self._bytes_since_index_entry = 0
        # Empty until create's truncation, load or recover makes the file's state known.
        self._tail = _Tail()
        # When this segment's age for segment.ms starts: the first append, or on load the first
        # batch's timestamp (so restarts do not postpone rolls), whichever is earlier.
        self.roll_base_ms: int | None = None

    @classmethod
    def create(
        cls,
        fs: FileSystem,
        dir_path: str,
        base_offset: int,
        config: LogConfig,
        *,
        swap_suffix: str = "",
    ) -> LogSegment:
        """A new empty segment; leftover files with its name are emptied. With `swap_suffix`
        (".cleaned") every file name gets it: a segment the cleaner builds beside the live one.
        """
        segment = cls(fs, dir_path, base_offset, config, create=True, swap_suffix=swap_suffix)
        segment._log.truncate(0)
        segment._offset_index.reset()
        segment._time_index.reset()
        segment.txn_index.reset()
        return segment

    @classmethod
    def open(
        cls,
        fs: FileSystem,
        dir_path: str,
        base_offset: int,
        config: LogConfig,
        *,
        swap_suffix: str = "",
    ) -> LogSegment:
        """An existing segment's files; call load() or recover() before using it."""
        return cls(fs, dir_path, base_offset, config, create=False, swap_suffix=swap_suffix)

    def forget_tail(self) -> None:
        """Drop the in-memory tail (the segment is no longer the active one): reads here go to
        the file, and a log of many segments keeps the headers of only its last."""
        self._tail = _Tail()

    # ---- state ----

    @property
    def config(self) -> LogConfig:
        return self._config

    @config.setter
    def config(self, config: LogConfig) -> None:
        """A topic config change: later appends follow the new index settings."""
        self._config = config
        self._offset_index.entries_max = config.offset_index_entries_max
        self._time_index.entries_max = config.time_index_entries_max

    @property
    def size(self) -> int:
        return self._log.size

    @property
    def largest_timestamp(self) -> int:
        """The largest batch maxTimestamp in the segment, -1 if none."""
        return self._max_timestamp

    @property
    def offset_of_largest_timestamp(self) -> int:
        """The last offset of the first batch whose maxTimestamp is `largest_timestamp` (Kafka's
        shallowOffsetOfMaxTimestampSoFar); meaningless while `largest_timestamp` is -1."""
        return self._offset_of_max_timestamp

    @property
    def is_index_full(self) -> bool:
        return self._offset_index.is_full or self._time_index.is_full

    @property
    def log_file(self) -> LogFile:
        return self._log

    def can_index(self, last_offset: int) -> bool:
        """Whether an offset fits the indexes' 32-bit relative offsets."""
        return 0 <= last_offset - self.base_offset <= INT32_MAX

    # ---- appending ----

    def append(self, records: Buffer, headers: Sequence[BatchHeader], now_ms: int) -> None:
        """Write whole, already validated batches (with their headers) in one file append."""
        position = self._log.size
        self._log.append(records)  # whole or nothing; raises before any state changes
        for header in headers:
            self._track_batch(header, position)
            position += header.size
        self.next_offset = headers[-1].next_offset
        if self.roll_base_ms is None:
            self.roll_base_ms = now_ms

    def _track_batch(self, header: BatchHeader, position: int) -> None:
        if header.max_timestamp > self._max_timestamp:
            self._max_timestamp = header.max_timestamp
            self._offset_of_max_timestamp = header.last_offset
        indexed = False
        if self._bytes_since_index_entry > self._config.index_interval_bytes:
            self._bytes_since_index_entry = 0
            try:
                if not self._offset_index.is_full:
                    self._offset_index.append(header.last_offset, position)
                    indexed = True  # lookups now land here: the tail can start here too
                if not self._time_index.is_full:
                    self._time_index.maybe_append(
                        self._max_timestamp, self._offset_of_max_timestamp
                    )
            except OSError:
                # Indexes are derived and sparse: an entry the disk refused only makes lookups
                # scan further. The next log append reports a failing disk.
                pass
        self._bytes_since_index_entry += header.size
        self._tail.add(position, header, restart=indexed)

    # ---- loading and recovery (the loader calls these once, before any other use) ----

    def load(self, now_ms: int) -> None:
        """Trust the indexes after checks and walk only the headers after the last index entry.

        Raises CorruptIndexError or CorruptRecordError when the files disagree; the loader then
        recovers the segment instead.
        """
        self._offset_index.load(self._log.size)
        self._time_index.load(self._log.size)
        self._rescan_tail()
        time_entry = self._time_index.last_entry()
        if time_entry is not None and time_entry[1] >= self.next_offset:
            raise CorruptIndexError(f"{self._paths[2]}: entry past the segment's end")
        self._set_roll_base(now_ms)

    def _rescan_tail(self) -> None:
        """Restore the end state from the indexes' last entries and a walk of the headers after
        the last offset-index entry (at most about index.interval.bytes of them).
        """
        self._tail = _Tail()  # the walk below must read the file, not what it replaces
        self._max_timestamp, self._offset_of_max_timestamp = -1, self.base_offset
        time_entry = self._time_index.last_entry()
        if time_entry is not None:
            self._max_timestamp, self._offset_of_max_timestamp = time_entry
        position, self.next_offset = 0, self.base_offset
        last_entry = self._offset_index.last_entry()
        if last_entry is not None:
            offset, position = last_entry
            header = read_header(self._log.read(position, BATCH_HEADER_SIZE))
            if header.last_offset != offset:
                raise CorruptIndexError(f"{self._paths[1]}: entry {offset} points at {header}")
            self.next_offset = header.base_offset
        tail = _Tail()
        for batch_position, header in self._walk_headers(position, self.next_offset):
            if header.max_timestamp > self._max_timestamp:
                self._max_timestamp = header.max_timestamp
                self._offset_of_max_timestamp = header.last_offset
            self.next_offset = header.next_offset
            tail.add(batch_position, header, restart=False)
        self._tail = tail  # only once the walk is whole: a failed one leaves the tail empty
        self._bytes_since_index_entry = self._log.size - position

    def _walk_headers(
        self, position: int, expected_offset: int | None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """Headers from `position` (a batch start) to the end of the file, checking that each batch
        follows the one before (and starts at `expected_offset`, unless that is None). Those in
        the tail come from memory.
        """
        log_size = self._log.size
        while position < log_size:
            tail_index = self._tail.index_of(position)
            if tail_index is not None:
                yield from self._walk_tail(tail_index, expected_offset)
                return
            header = read_header(self._log.read(position, BATCH_HEADER_SIZE))
            expected_offset = header.base_offset if expected_offset is None else expected_offset
            if header.base_offset != expected_offset or position + header.size > log_size:
                raise CorruptRecordError(
                    f"{self._paths[0]}: batch at position {position} does not follow on: {header}"
                )
            yield position, header
            position += header.size
            expected_offset = header.next_offset

    def _walk_tail(
        self, index: int, expected_offset: int | None
    ) -> Iterator[tuple[int, BatchHeader]]:
        """_walk_headers from the tail's `index`-th batch. The tail was checked to follow on when
        it was built; only its join to the walk so far is left to check.
        """
        positions, headers = self._tail.positions[index:], self._tail.headers[index:]
        if expected_offset is not None and headers[0].base_offset != expected_offset:
            raise CorruptRecordError(
                f"{self._paths[0]}: batch at position {positions[0]} does not follow on: "
                f"{headers[0]}"
            )
        yield from zip(positions, headers, strict=True)

    def recover(self, now_ms: int) -> int:
        """Rebuild the indexes from every valid batch; cut the file at the first bad one.

        Returns the number of bytes cut.
        """
        self._offset_index.reset()
        self._time_index.reset()
        self._tail = _Tail()  # rebuilt by _track_batch from position 0
        self.next_offset = self.base_offset
        self._max_timestamp = -1
        self._bytes_since_index_entry = 0
        valid_end = 0
        for position, header in self._valid_batches():
            self._track_batch(header, position)
            self.next_offset = header.next_offset
            valid_end = position + header.size
        truncated_bytes = self._log.size - valid_end
        if truncated_bytes:
            self._log.truncate(valid_end)
        self._set_roll_base(now_ms)
        return truncated_bytes

    def _valid_batches(self) -> Iterator[tuple[int, BatchHeader]]:
        """Batches from the start that pass validate_batch and follow on; stops at the first not."""
        log_size = self._log.size
        position, expected_offset = 0, self.base_offset
        chunk, chunk_start = b"", 0
        while position < log_size:
            if position + BATCH_HEADER_SIZE > chunk_start + len(chunk):
                chunk, chunk_start = self._log.read(position, LOG_RECOVERY_READ_BYTES), position
            try:
                header = read_header(chunk, position - chunk_start)
            except CorruptRecordError:
                return
            end = position + header.size
            if header.base_offset != expected_offset or end > log_size:
                return
            if not self.can_index(header.last_offset):
                return
            if end > chunk_start + len(chunk):
                chunk = self._log.read(position, max(header.size, LOG_RECOVERY_READ_BYTES))
                chunk_start = position
            try:
                validate_batch(chunk, position - chunk_start)
            except CorruptRecordError:
                return
            yield position, header
            position, expected_offset = end, header.next_offset

    def _set_roll_base(self, now_ms: int) -> None:
        if self._log.size == 0:
            self.roll_base_ms = None
            return
        first = read_header(self._log.read(0, BATCH_HEADER_SIZE))
        self.roll_base_ms = min(now_ms, first.max_timestamp) if first.max_timestamp >= 0 else now_ms

    # ---- reading ----

    def read(
        self, start_offset: int, max_bytes: int, max_offset_exclusive: int, min_one_batch: bool
    ) -> FileSlice | None:
        """Whole batches from the one holding `start_offset`, all ending below
        `max_offset_exclusive`, within `max_bytes` unless `min_one_batch` needs the first whole.
        """
        found = self._find_batch(start_offset)
        if found is None:
            return None
        start, first = found
        if first.last_offset >= max_offset_exclusive:
            return None
        log_size = self._log.size
        if max_offset_exclusive >= self.next_offset and log_size - start <= max_bytes:
            # The rest, no walk needed.
            return FileSlice(self._log, start, log_size - start, self.next_offset)
        # Indexed positions are batch starts: jump to the last one that keeps within both limits.
        jump = self._offset_index.floor_position(start + max_bytes, max_offset_exclusive)
        end = jump if jump is not None and jump > start else start
        next_offset = self.next_offset  # if the walk reaches the end of the file
        for position, header in self._walk_headers(end, None):
            if header.last_offset >= max_offset_exclusive or (
                position + header.size - start > max_bytes
            ):
                next_offset = header.base_offset  # the first batch left out
                break
            end = position + header.size
        if end == start and min_one_batch:
            end = start + first.size  # KIP-74: one batch larger than max_bytes still goes out
            next_offset = first.last_offset + 1
        return FileSlice(self._log, start, end - start, next_offset) if end > start else None

    def _find_batch(self, offset: int) -> tuple[int, BatchHeader] | None:
        """(position, header) of the first batch whose last offset is >= `offset`."""
        if offset >= self.next_offset:
            return None
        found = self._tail.find(offset)
        if found is not None:
            return found
        _, indexed_position = self._offset_index.lookup(offset)
        for position, header in self._walk_headers(indexed_position, None):
            if header.last_offset >= offset:
                return position, header
        return None

    def batches_from(self, offset: int) -> Iterator[tuple[int, BatchHeader]]:
        """(position, header) of the batch holding `offset` and of every batch after it here."""
        found = self._find_batch(offset)
        if found is not None:
            yield from self._walk_headers(found[0], None)

    def read_batch(self, position: int, header: BatchHeader) -> bytes:
        """The bytes of the batch at `position` (as `batches_from` found it)."""
        return self._log.read(position, header.size)

    def headers_from(self, offset: int) -> Iterator[BatchHeader]:
        """Headers of the batch holding `offset` and of every batch after it here."""
        found = self._find_batch(offset)
        if found is not None:
            for _, header in self._walk_headers(found[0], None):
                yield header

    def find_offset_for_timestamp(
        self, timestamp: int, start_offset: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `start_offset` whose timestamp is
        >= `timestamp`. Decodes only the batches whose largest timestamp qualifies (usually one).
        """
        if self._max_timestamp < timestamp:
            return None
        search_from = max(self._time_index.lookup(timestamp), start_offset)
        found = self._find_batch(search_from)
        if found is None:
            return None
        for position, header in self._walk_headers(found[0], None):
            if header.max_timestamp < timestamp or header.last_offset < start_offset:
                continue
            batch = self._log.read(position, header.size)
            for record in decode_batch(batch):
                if record.offset >= start_offset and record.timestamp >= timestamp:
                    return record.offset, record.timestamp
        return None

    # ---- truncation, flushing, removal ----

    def truncate_to(self, offset: int) -> int:
        """Drop the batch holding `offset` and all after it; returns the bytes removed."""
        found = self._find_batch(offset)
        if found is None:
            return 0
        position, _ = found
        removed_bytes = self._log.size - position
        self._tail = _Tail()  # if a step below fails, no header of a cut batch stays in memory
        self._log.truncate(position)
        self._offset_index.truncate_to(offset)
        self._time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self._rescan_tail()
        if self._log.size == 0:
            self.roll_base_ms = None
        return removed_bytes

    def flush(self) -> None:
        """fsync the log and its indexes."""
        self._log.sync()
        self._offset_index.sync()
        self._time_index.sync()
        self.txn_index.sync()

    def delete(self) -> None:
        """Unlink the files. The log file is not closed: a FileSlice handed to the network may
        still reference it, and closing would break (or, with a reused fd, corrupt) that send.
        Dropping the segment drops our reference; the fd closes with the last one.
        """
        for path in self._paths:  # the .log first: a crash in between leaves only index orphans
            if self._fs.exists(path):
                self._fs.remove(path)
        self.txn_index.delete()
        self._offset_index.close()
        self._time_index.close()

    def rename_files(self, swap_suffix: str) -> None:
        """Rename the files to end in `swap_suffix` ("" for the live names); open files stay
        valid. The indexes go first and the .log last: a `.log.swap` marks a finished swap, and
        by then its indexes are in place (loader.py completes or drops the rest).
        """
        new_paths = _segment_paths(self._dir_path, self.base_offset, swap_suffix)
        txn_path = segment_file_name(self.base_offset, TXN_INDEX_SUFFIX) + swap_suffix
        self.txn_index.rename(os.path.join(self._dir_path, txn_path))
        for index in (1, 2, 0):
            self._fs.rename(self._paths[index], new_paths[index])
        self._paths = new_paths

    def release(self) -> None:
        """Forget a segment whose files a swap replaced: close its indexes, never unlink (the
        names now hold the new segment). The log file stays open for in-flight FileSlices and
        closes with its last reference, as in delete().
        """
        self._offset_index.close()
        self._time_index.close()
        self.txn_index.close()

    def close(self) -> None:
        self._log.close()
        self._offset_index.close()
        self._time_index.close()
        self.txn_index.close()

    def __repr__(self) -> str:
        return (
            f"LogSegment(base_offset={self.base_offset}, next_offset={self.next_offset}, "
            f"size={self._log.size})"
        )
