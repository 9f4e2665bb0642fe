"""A segment's aborted-transaction index: Kafka's `.txnindex` file.

A read_committed consumer must drop the records of aborted transactions. The log tells it which
ones by listing, in each Fetch answer, the aborted transactions that overlap the fetched range
(producer id and first offset); the client then skips that producer's records from the first
offset until it meets the abort marker. The index answers that question without reading
records: one entry per aborted transaction, in the segment that holds its ABORT marker.

Each entry is 34 bytes, as Kafka writes them: version int16 (0), producer id int64, first offset
int64, last offset (the marker's) int64, last stable offset int64 (the LSO once this transaction
ended). Entries are in marker order, so truncating the log truncates the file at an entry
boundary. The file is created on the first abort only: most segments never hold one.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from rlog.core.storage.files import FileSystem, LogFile

ENTRY = struct.Struct(">hqqqq")
ENTRY_VERSION = 0


class CorruptTxnIndexError(Exception):
    """A `.txnindex` file that does not parse; the segment rebuilds it from the log."""


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset
    last_stable_offset: int

    def encode(self) -> bytes:
        return ENTRY.pack(
            ENTRY_VERSION,
            self.producer_id,
            self.first_offset,
            self.last_offset,
            self.last_stable_offset,
        )


def parse_entries(data: bytes) -> list[AbortedTxn]:
    """The entries of a `.txnindex` file; a torn last entry (crash mid-append) is dropped."""
    whole = len(data) - len(data) % ENTRY.size
    entries = []
    for position in range(0, whole, ENTRY.size):
        version, producer_id, first, last, stable = ENTRY.unpack_from(data, position)
        if version != ENTRY_VERSION or not 0 <= first <= last:
            raise CorruptTxnIndexError(f"bad entry at byte {position}")
        entries.append(AbortedTxn(producer_id, first, last, stable))
    return entries


class TxnIndex:
    """One segment's aborted transactions, kept in memory and appended to its file."""

    def __init__(self, fs: FileSystem, path: str, *, load: bool) -> None:
        self._fs = fs
        self.path = path
        self._file: LogFile | None = None
        self._rewrite = False  # a failed append: the file misses entries
        self.entries: list[AbortedTxn] = []
        if load and fs.exists(path):
            self.entries = parse_entries(fs.read_bytes(path))

    def append(self, entry: AbortedTxn) -> None:
        """Remember it, then write it. If the write fails the entry still counts (a consumer must
        never read that transaction's records), and sync() rewrites the whole file."""
        written = len(self.entries) * ENTRY.size
        self.entries.append(entry)
        try:
            file = self._open(written)
            if not self._rewrite:
                file.append(entry.encode())
        except OSError:
            self._rewrite = True
            raise

    def _open(self, expected_size: int | None = None) -> LogFile:
        if self._file is None:
            file = self._fs.open(self.path, create=True)
            expected = len(self.entries) * ENTRY.size if expected_size is None else expected_size
            if file.size != expected:
                self._rewrite = True  # a torn tail, or entries the file never got
            self._file = file
        return self._file

    def truncate_to(self, offset: int) -> None:
        """Forget the transactions whose marker is at or after `offset`."""
        keep = [entry for entry in self.entries if entry.last_offset < offset]
        if len(keep) == len(self.entries):
            return
        self.entries = keep
        self._open().truncate(len(keep) * ENTRY.size)

    def reset(self) -> None:
        """Empty it, before a rebuild from the log."""
        self.entries = []
        if self._file is not None or self._fs.exists(self.path):
            self._open().truncate(0)
            self._rewrite = False

    def sync(self) -> None:
        if self._rewrite:
            file = self._open()
            file.truncate(0)
            if self.entries:
                file.append(b"".join(entry.encode() for entry in self.entries))
            self._rewrite = False
        if self._file is not None:
            self._file.sync()

    def rename(self, path: str) -> None:
        if self._file is not None or self._fs.exists(self.path):
            self._fs.rename(self.path, path)
        self.path = path

    def delete(self) -> None:
        self.close()
        if self._fs.exists(self.path):
            self._fs.remove(self.path)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
