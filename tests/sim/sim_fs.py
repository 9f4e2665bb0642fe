"""An in-memory FileSystem (core/storage/files.py) for the simulation: no disk I/O, and a crash
that loses what was never synced.

Each file keeps its bytes and how many of them are durable (`synced`). `append` puts bytes in the
"OS" (they survive a process kill); `sync` makes them durable. `crash(power_loss=True)` drops every
unsynced byte of every file, optionally keeping a seeded prefix of the unsynced tail of one file (a
torn write). `failing = True` is a failed disk: every write, sync, truncate and atomic
replace raises EIO, reads still work. Simplifications, stated: names (create, rename, remove,
truncate) and `replace_atomically` are durable as soon as the call returns; a file created and
never synced survives a power loss empty, not absent; a failed write writes nothing.
"""

from __future__ import annotations

import errno
import posixpath
import random

from rlog.core.storage.files import Buffer


class SimFile:
    def __init__(self, fs: SimFileSystem, path: str) -> None:
        self._fs = fs
        self._name = path
        self.data = bytearray()
        self.synced = 0  # bytes [0, synced) survive a power loss

    @property
    def name(self) -> str:
        return self._name

    @property
    def size(self) -> int:
        return len(self.data)

    def append(self, data: Buffer) -> None:
        self._fs.check_disk()
        self.data += data

    def read(self, position: int, size: int) -> bytes:
        return bytes(self.data[position : position + size])

    def sync(self) -> None:
        self._fs.check_disk()
        self.synced = len(self.data)

    def truncate(self, size: int) -> None:
        self._fs.check_disk()
        if size < len(self.data):
            del self.data[size:]
        else:
            self.data += bytes(size - len(self.data))
        self.synced = min(self.synced, size)

    def close(self) -> None:
        pass

    def fileno(self) -> int:
        return -1  # no sendfile in the simulation; FileSlice.read() is used instead

    def crash(self, keep_unsynced_bytes: int = 0) -> None:
        del self.data[self.synced + keep_unsynced_bytes :]


class SimFileSystem:
    def __init__(self) -> None:
        self.files: dict[str, SimFile] = {}
        self.dirs: set[str] = {"/"}
        self.failing = False  # a failed disk: writes raise EIO
        self.failures = 0  # writes refused so far (the daemon's LogDirHealth counts them too)

    def check_disk(self) -> None:
        if self.failing:
            self.failures += 1
            raise OSError(errno.EIO, "Input/output error (a simulated disk failure)")

    # ---- the FileSystem protocol ----

    def open(self, path: str, create: bool) -> SimFile:
        path = posixpath.normpath(path)
        found = self.files.get(path)
        if found is None:
            if not create:
                raise FileNotFoundError(path)
            self._check_parent(path)
            found = self.files[path] = SimFile(self, path)
        return found

    def listdir(self, path: str) -> list[str]:
        path = posixpath.normpath(path)
        if path not in self.dirs:
            raise FileNotFoundError(path)
        names = {posixpath.basename(p) for p in self.files if posixpath.dirname(p) == path}
        names |= {
            posixpath.basename(d) for d in self.dirs if d != path and posixpath.dirname(d) == path
        }
        return sorted(names)

    def exists(self, path: str) -> bool:
        path = posixpath.normpath(path)
        return path in self.files or path in self.dirs

    def is_dir(self, path: str) -> bool:
        return posixpath.normpath(path) in self.dirs

    def remove(self, path: str) -> None:
        path = posixpath.normpath(path)
        if path not in self.files:
            raise FileNotFoundError(path)
        del self.files[path]

    def remove_tree(self, path: str) -> None:
        path = posixpath.normpath(path)
        prefix = path + "/"
        for name in [p for p in self.files if p.startswith(prefix)]:
            del self.files[name]
        self.dirs = {d for d in self.dirs if d != path and not d.startswith(prefix)}

    def rename(self, src: str, dst: str) -> None:
        src, dst = posixpath.normpath(src), posixpath.normpath(dst)
        if src not in self.files:
            raise FileNotFoundError(src)
        file = self.files.pop(src)
        file._name = dst
        self.files[dst] = file

    def makedirs(self, path: str) -> None:
        path = posixpath.normpath(path)
        while path not in self.dirs:
            self.dirs.add(path)
            path = posixpath.dirname(path)

    def sync_dir(self, path: str) -> None:
        pass  # names are durable at once in this model

    def replace_atomically(self, path: str, data: bytes) -> None:
        self.check_disk()
        path = posixpath.normpath(path)
        self._check_parent(path)
        file = SimFile(self, path)
        file.data += data
        file.sync()
        self.files[path] = file

    def read_bytes(self, path: str) -> bytes:
        path = posixpath.normpath(path)
        if path not in self.files:
            raise FileNotFoundError(path)
        return bytes(self.files[path].data)

    # ---- faults ----

    def crash(self, rng: random.Random | None = None, *, power_loss: bool = True) -> None:
        """The process died. Without power loss the OS kept every appended byte; with it, every
        unsynced byte is gone, except (if `rng`) a seeded prefix of one file's unsynced tail.
        """
        if not power_loss:
            return
        torn: SimFile | None = None
        if rng is not None:
            dirty = [f for _, f in sorted(self.files.items()) if len(f.data) > f.synced]
            torn = rng.choice(dirty) if dirty and rng.random() < 0.5 else None
        for file in self.files.values():
            keep = 0
            if file is torn and rng is not None:
                keep = rng.randrange(len(file.data) - file.synced)
            file.crash(keep)

    def _check_parent(self, path: str) -> None:
        parent = posixpath.dirname(path)
        if parent not in self.dirs:
            raise FileNotFoundError(parent)

    def unsynced_bytes(self) -> int:
        return sum(len(f.data) - f.synced for f in self.files.values())
