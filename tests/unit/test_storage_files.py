from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from rlog.core.storage.files import FaultyFileSystem, FileSlice, RealFileSystem


def test_append_read_truncate_and_slices(tmp_path: Path) -> None:
    fs = RealFileSystem()
    path = str(tmp_path / "f")
    file = fs.open(path, create=True)
    file.append(b"hello ")
    file.append(memoryview(b"world"))
    assert file.size == 11 == os.path.getsize(path)
    assert file.read(6, 100) == b"world"
    assert FileSlice(file, 2, 3).read() == b"llo"
    assert FileSlice(file, 0, 1).fileno() == file.fileno()
    file.truncate(5)
    assert (file.size, fs.read_bytes(path)) == (5, b"hello")
    file.sync()
    file.close()
    assert fs.open(path, create=False).size == 5


def test_replace_atomically(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    path = str(tmp_path / "checkpoint")
    fs.replace_atomically(path, b"one")
    fs.faults.sync_failures = 1
    with pytest.raises(OSError):
        fs.replace_atomically(path, b"two")
    assert fs.read_bytes(path) == b"one"  # the failed write never replaced the file
    fs.replace_atomically(path, b"three")
    assert fs.read_bytes(path) == b"three"


def test_full_disk_append_raises_and_leaves_file_unchanged(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    file = fs.open(str(tmp_path / "f"), create=True)
    file.append(b"abc")
    fs.faults.disk_full = True
    with pytest.raises(OSError) as raised:
        file.append(b"defg")
    assert raised.value.errno == errno.ENOSPC
    assert file.size == 3 == os.path.getsize(file.name)
    fs.faults.disk_full = False
    file.append(b"d")
    assert fs.read_bytes(file.name) == b"abcd"


def test_torn_append_is_rolled_back(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    file = fs.open(str(tmp_path / "f"), create=True)
    file.append(b"abc")
    fs.faults.tear_next_append_bytes = 2
    with pytest.raises(OSError):
        file.append(b"defg")
    assert file.size == 3 == os.path.getsize(file.name)
    file.append(b"xy")
    assert fs.read_bytes(file.name) == b"abcxy"


def test_torn_append_that_cannot_be_undone_refuses_later_appends(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    file = fs.open(str(tmp_path / "f"), create=True)
    file.append(b"abc")
    fs.faults.tear_next_append_bytes = 2
    fs.faults.rollback_fails = True
    with pytest.raises(OSError):
        file.append(b"defg")
    with pytest.raises(OSError, match="could not be undone"):
        file.append(b"x")
    file.truncate(3)  # a truncate puts the file back at a known size
    file.append(b"x")
    assert fs.read_bytes(file.name) == b"abcx"


def test_failed_fsync_raises_once(tmp_path: Path) -> None:
    fs = FaultyFileSystem()
    file = fs.open(str(tmp_path / "f"), create=True)
    fs.faults.sync_failures = 1
    with pytest.raises(OSError) as raised:
        file.sync()
    assert raised.value.errno == errno.EIO
    file.sync()


def test_deleted_file_stays_readable_through_a_slice(tmp_path: Path) -> None:
    fs = RealFileSystem()
    file = fs.open(str(tmp_path / "f"), create=True)
    file.append(b"payload")
    file_slice = FileSlice(file, 3, 4)
    del file
    fs.remove(str(tmp_path / "f"))
    assert file_slice.read() == b"load"
    assert os.fstat(file_slice.fileno()).st_nlink == 0  # still open, though unlinked
