"""Sparse segment indexes in Kafka's on-disk formats, kept whole in memory and appended to a file.

`.index`: (int32 offset relative to the segment's base, int32 file position) of a batch, keyed by
the batch's last offset. `.timeindex`: (int64 timestamp, int32 relative offset), an entry each
time the segment's largest timestamp grows. Both are derived from the log: a file that fails the
checks on load is rebuilt from the log, never trusted.
"""

from __future__ import annotations

import operator
import struct
from array import array
from bisect import bisect_left, bisect_right
from itertools import islice

from rlog.core.storage.files import LogFile

INT32_MAX = 2**31 - 1


class CorruptIndexError(Exception):
    """An index file fails its checks; the segment rebuilds it from the log."""


def _strictly_increasing(values: array) -> bool:
    return all(map(operator.lt, values, islice(values, 1, None)))


def _non_decreasing(values: array) -> bool:
    return all(map(operator.le, values, islice(values, 1, None)))


class _SparseIndex:
    """Entries (key, value) with strictly increasing keys, searched by bisection on the keys."""

    _ENTRY: struct.Struct
    _KEY_TYPE: str

    def __init__(self, file: LogFile, base_offset: int, entries_max: int) -> None:
        self._file = file
        self.base_offset = base_offset
        self.entries_max = entries_max
        self._keys = array(self._KEY_TYPE)
        self._values = array("i")

    @property
    def name(self) -> str:
        return self._file.name

    @property
    def is_full(self) -> bool:
        return len(self._keys) >= self.entries_max

    def __len__(self) -> int:
        return len(self._keys)

    def load(self, log_size_bytes: int) -> None:
        """Read the file's entries; CorruptIndexError if they cannot describe this log."""
        entry_size = self._ENTRY.size
        data = self._file.read(0, self._file.size)
        if len(data) % entry_size:
            raise CorruptIndexError(
                f"{self.name}: size {len(data)} is not a multiple of {entry_size}"
            )
        keys = array(self._KEY_TYPE)
        values = array("i")
        for key, value in self._ENTRY.iter_unpack(data):
            keys.append(key)
            values.append(value)
        self._check(keys, values, log_size_bytes)
        self._keys, self._values = keys, values

    def _check(self, keys: array, values: array, log_size_bytes: int) -> None:
        raise NotImplementedError

    def reset(self) -> None:
        """Drop every entry, in memory and in the file, before a rebuild."""
        self._file.truncate(0)
        self._keys = array(self._KEY_TYPE)
        self._values = array("i")

    def _append(self, key: int, value: int) -> None:
        self._file.append(self._ENTRY.pack(key, value))  # first: memory never runs ahead of disk
        self._keys.append(key)
        self._values.append(value)

    def _keep_first(self, count: int) -> None:
        if count < len(self._keys):
            self._file.truncate(count * self._ENTRY.size)
            del self._keys[count:]
            del self._values[count:]

    def sync(self) -> None:
        self._file.sync()

    def close(self) -> None:
        self._file.close()


class OffsetIndex(_SparseIndex):
    _ENTRY = struct.Struct(">ii")
    _KEY_TYPE = "i"

    def append(self, offset: int, position: int) -> None:
        """Index the batch at `position` whose last offset is `offset`."""
        relative = offset - self.base_offset
        assert 0 <= relative <= INT32_MAX, (offset, self.base_offset)
        assert not self._keys or (relative > self._keys[-1] and position > self._values[-1])
        self._append(relative, position)

    def lookup(self, offset: int) -> tuple[int, int]:
        """(offset, position) of the last entry with offset <= `offset`, else (base, 0)."""
        index = bisect_right(self._keys, offset - self.base_offset) - 1
        if index < 0:
            return self.base_offset, 0
        return self.base_offset + self._keys[index], self._values[index]

    def last_entry(self) -> tuple[int, int] | None:
        if not self._keys:
            return None
        return self.base_offset + self._keys[-1], self._values[-1]

    def floor_position(self, position_max: int, offset_end: int) -> int | None:
        """The last indexed position <= `position_max` whose batch ends below `offset_end`.

        Indexed positions are batch starts, so every batch before it also ends below
        `offset_end`: a reader can jump there instead of walking each header.
        """
        index = min(
            bisect_right(self._values, position_max),
            bisect_left(self._keys, offset_end - self.base_offset),
        )
        return self._values[index - 1] if index > 0 else None

    def truncate_to(self, offset: int) -> None:
        """Drop entries for batches ending at or after `offset`."""
        self._keep_first(bisect_left(self._keys, offset - self.base_offset))

    def _check(self, keys: array, values: array, log_size_bytes: int) -> None:
        if keys and (keys[0] < 0 or values[0] < 0):
            raise CorruptIndexError(f"{self.name}: negative first entry")
        if not (_strictly_increasing(keys) and _strictly_increasing(values)):
            raise CorruptIndexError(f"{self.name}: entries are not increasing")
        if values and values[-1] >= log_size_bytes:
            raise CorruptIndexError(
                f"{self.name}: position {values[-1]} is past the log's {log_size_bytes} bytes"
            )


class TimeIndex(_SparseIndex):
    _ENTRY = struct.Struct(">qi")
    _KEY_TYPE = "q"

    def maybe_append(self, timestamp: int, offset: int) -> None:
        """Record that the segment's largest timestamp reached `timestamp` at batch `offset`."""
        if self._keys and timestamp <= self._keys[-1]:
            return
        relative = offset - self.base_offset
        assert 0 <= relative <= INT32_MAX, (offset, self.base_offset)
        assert not self._values or relative >= self._values[-1]
        self._append(timestamp, relative)

    def lookup(self, timestamp: int) -> int:
        """Offset of the last entry with timestamp <= `timestamp`, else the base offset.

        Every batch before that entry's batch has a smaller largest timestamp, so a search for
        the first batch reaching `timestamp` may start there.
        """
        index = bisect_right(self._keys, timestamp) - 1
        return self.base_offset + (self._values[index] if index >= 0 else 0)

    def last_entry(self) -> tuple[int, int] | None:
        """(timestamp, offset) of the last entry."""
        if not self._keys:
            return None
        return self._keys[-1], self.base_offset + self._values[-1]

    def truncate_to(self, offset: int) -> None:
        """Drop entries pointing at batches that end at or after `offset`."""
        self._keep_first(bisect_left(self._values, offset - self.base_offset))

    def _check(self, keys: array, values: array, log_size_bytes: int) -> None:
        if values and values[0] < 0:
            raise CorruptIndexError(f"{self.name}: negative relative offset")
        if not (_strictly_increasing(keys) and _non_decreasing(values)):
            raise CorruptIndexError(f"{self.name}: entries are not increasing")
