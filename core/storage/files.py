"""The small file interface storage uses, so tests can inject torn writes, failed fsyncs, full disk.

`append` returning means the OS has the bytes (our durability floor against kill -9); `sync` is
the fsync that survives power loss. An append either lands whole or leaves the file as it was.
"""

from __future__ import annotations

import errno
import os
import shutil
from dataclasses import dataclass
from typing import Protocol

from rlog.core.values import value

Buffer = bytes | bytearray | memoryview

# Suffix of a file being written by replace_atomically; the loader removes leftovers of a crash.
TMP_SUFFIX = ".tmp"


class LogFile(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def size(self) -> int: ...

    def append(self, data: Buffer) -> None: ...

    def read(self, position: int, size: int) -> bytes: ...

    def sync(self) -> None: ...

    def truncate(self, size: int) -> None: ...

    def close(self) -> None: ...

    def fileno(self) -> int: ...


class FileSystem(Protocol):
    def open(self, path: str, create: bool) -> LogFile: ...

    def listdir(self, path: str) -> list[str]: ...

    def exists(self, path: str) -> bool: ...

    def is_dir(self, path: str) -> bool: ...

    def remove(self, path: str) -> None: ...

    def remove_tree(self, path: str) -> None: ...

    def rename(self, src: str, dst: str) -> None: ...

    def makedirs(self, path: str) -> None: ...

    def sync_dir(self, path: str) -> None: ...

    def replace_atomically(self, path: str, data: bytes) -> None: ...

    def read_bytes(self, path: str) -> bytes: ...


@value
class FileSlice:
    """Bytes [position, position + size) of a log file, for os.sendfile.

    It holds the file object, so a segment deleted meanwhile keeps its fd open until the slice is
    gone (see LogSegment.delete).
    """

    file: LogFile
    position: int
    size: int
    # The offset right after the slice's last batch (-1: not known), so a fetch can count the
    # offsets it serves without reading the batches.
    next_offset: int = -1

    def fileno(self) -> int:
        return self.file.fileno()

    def read(self) -> bytes:
        """The bytes themselves, for tests and paths that cannot use sendfile."""
        return self.file.read(self.position, self.size)


class RealFile:
    """A file opened O_APPEND with an unbuffered fd; its size is tracked, not asked of the OS."""

    def __init__(self, path: str, create: bool) -> None:
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        self._name = path
        self._fd = -1  # so __del__ is safe if os.open raises
        self._fd = os.open(path, flags, 0o644)
        self._size = os.fstat(self._fd).st_size
        # A failed append whose rollback also failed leaves unknown bytes at the end; appending
        # after them would put data at positions we do not know, so the file refuses appends.
        self._broken = False

    @property
    def name(self) -> str:
        return self._name

    @property
    def size(self) -> int:
        return self._size

    def append(self, data: Buffer) -> None:
        if self._broken:
            raise OSError(errno.EIO, "an earlier append failed and could not be undone", self._name)
        view = memoryview(data)
        written = 0
        try:
            while written < len(view):
                written += self._write(view[written:])
        except OSError:
            self._undo_partial_append()  # some bytes may be in the file even if none were counted
            raise
        self._size += written

    def _write(self, data: memoryview) -> int:
        return os.write(self._fd, data)

    def _undo_partial_append(self) -> None:
        try:
            os.ftruncate(self._fd, self._size)
        except OSError:
            self._broken = True

    def read(self, position: int, size: int) -> bytes:
        """Up to `size` bytes from `position`; fewer only at the end of the file."""
        chunks = []
        while size > 0:
            chunk = os.pread(self._fd, size, position)
            if not chunk:
                break
            chunks.append(chunk)
            position += len(chunk)
            size -= len(chunk)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def sync(self) -> None:
        os.fsync(self._fd)

    def truncate(self, size: int) -> None:
        os.ftruncate(self._fd, size)
        self._size = size
        self._broken = False

    def close(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            os.close(fd)

    def fileno(self) -> int:
        return self._fd

    def __del__(self) -> None:
        # Deleted segments drop their files without closing them (a FileSlice may still be in
        # flight); the fd closes here when the last reference goes.
        self.close()


class RealFileSystem:
    def open(self, path: str, create: bool) -> LogFile:
        return RealFile(path, create)

    def listdir(self, path: str) -> list[str]:
        return os.listdir(path)

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def remove(self, path: str) -> None:
        os.remove(path)

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path)

    def rename(self, src: str, dst: str) -> None:
        os.rename(src, dst)

    def makedirs(self, path: str) -> None:
        os.makedirs(path, exist_ok=True)

    def sync_dir(self, path: str) -> None:
        """Make created, renamed and removed names in `path` durable."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self._fsync(fd)
        finally:
            os.close(fd)

    def replace_atomically(self, path: str, data: bytes) -> None:
        """Readers see the old content or the new, never a mix, even after a power loss."""
        tmp_path = path + TMP_SUFFIX
        fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            self._fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp_path, path)
        self.sync_dir(os.path.dirname(path) or ".")

    def read_bytes(self, path: str) -> bytes:
        with open(path, "rb") as file:
            return file.read()

    def _fsync(self, fd: int) -> None:
        os.fsync(fd)


@dataclass
class Faults:
    """What FaultyFileSystem breaks next; tests set these between operations."""

    sync_failures: int = 0  # the next this many fsyncs (files and directories) raise EIO
    disk_full: bool = False  # appends write nothing and raise ENOSPC
    tear_next_append_bytes: int | None = None  # the next append writes this many bytes, then EIO
    rollback_fails: bool = False  # undoing a partial append fails too (the file becomes broken)

    def take_sync_failure(self) -> bool:
        if self.sync_failures > 0:
            self.sync_failures -= 1
            return True
        return False


class FaultyFile(RealFile):
    def __init__(self, path: str, create: bool, faults: Faults) -> None:
        super().__init__(path, create)
        self._faults = faults

    def _write(self, data: memoryview) -> int:
        faults = self._faults
        if faults.disk_full:
            raise OSError(errno.ENOSPC, "No space left on device (injected)", self.name)
        tear_bytes = faults.tear_next_append_bytes
        if tear_bytes is not None:
            faults.tear_next_append_bytes = None
            os.write(self.fileno(), data[: min(tear_bytes, len(data))])
            raise OSError(errno.EIO, "torn write (injected)", self.name)
        return super()._write(data)

    def _undo_partial_append(self) -> None:
        if self._faults.rollback_fails:
            self._broken = True
        else:
            super()._undo_partial_append()

    def sync(self) -> None:
        if self._faults.take_sync_failure():
            raise OSError(errno.EIO, "fsync failed (injected)", self.name)
        super().sync()


class FaultyFileSystem(RealFileSystem):
    """Real files on disk, with faults injected on request through `faults`."""

    def __init__(self) -> None:
        self.faults = Faults()

    def open(self, path: str, create: bool) -> LogFile:
        return FaultyFile(path, create, self.faults)

    def _fsync(self, fd: int) -> None:
        if self.faults.take_sync_failure():
            raise OSError(errno.EIO, "fsync failed (injected)")
        super()._fsync(fd)
