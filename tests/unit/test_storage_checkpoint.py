from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlog.core.storage.checkpoint import (
    CorruptCheckpointError,
    read_leader_epoch_checkpoint,
    read_offset_checkpoint,
    write_leader_epoch_checkpoint,
    write_offset_checkpoint,
)
from rlog.core.storage.files import RealFileSystem

fs = RealFileSystem()


def test_offset_checkpoint_round_trip_in_kafkas_format(tmp_path: Path) -> None:
    path = str(tmp_path / "recovery-point-offset-checkpoint")
    offsets = {("my-topic", 0): 42, ("my-topic", 11): 0, ("__consumer_offsets", 3): 2**40}
    write_offset_checkpoint(fs, path, offsets)
    assert Path(path).read_text() == (
        "0\n3\nmy-topic 0 42\nmy-topic 11 0\n__consumer_offsets 3 1099511627776\n"
    )
    assert read_offset_checkpoint(fs, path) == offsets
    assert not (tmp_path / "recovery-point-offset-checkpoint.tmp").exists()


def test_absent_checkpoint_is_empty(tmp_path: Path) -> None:
    assert read_offset_checkpoint(fs, str(tmp_path / "none")) == {}
    assert read_leader_epoch_checkpoint(fs, str(tmp_path / "none")) == []


@pytest.mark.parametrize(
    "text",
    [
        b"",
        b"0\n",
        b"1\n0\n",  # unknown version
        b"0\n2\nt 0 1\n",  # fewer entries than counted
        b"0\n1\nt 0 1\nt 1 1\n",  # more entries than counted
        b"0\n1\nt 0\n",
        b"0\n1\nt 0 -1\n",
        b"0\n1\nt x 1\n",
        b"0\n2\nt 0 1\nt 0 2\n",  # the same partition twice
        b"0\n1\nt  0 1\n",
        b"\xff\n",
    ],
)
def test_corrupt_offset_checkpoints_are_refused(tmp_path: Path, text: bytes) -> None:
    path = tmp_path / "checkpoint"
    path.write_bytes(text)
    with pytest.raises(CorruptCheckpointError):
        read_offset_checkpoint(fs, str(path))


@settings(max_examples=100, deadline=None)
@given(text=st.binary(max_size=60) | st.text(alphabet="01 \nt-", max_size=40).map(str.encode))
def test_any_bytes_parse_or_raise_corrupt_checkpoint(tmp_path_factory, text: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "checkpoint"
    path.write_bytes(text)
    try:
        offsets = read_offset_checkpoint(fs, str(path))
    except CorruptCheckpointError:
        return
    assert all(offset >= 0 and partition >= 0 for (_, partition), offset in offsets.items())


def test_leader_epoch_checkpoint(tmp_path: Path) -> None:
    path = str(tmp_path / "leader-epoch-checkpoint")
    write_leader_epoch_checkpoint(fs, path, [(0, 0), (2, 100), (5, 100)])
    assert Path(path).read_text() == "0\n3\n0 0\n2 100\n5 100\n"
    assert read_leader_epoch_checkpoint(fs, path) == [(0, 0), (2, 100), (5, 100)]
    for text in ("0\n2\n3 0\n2 10\n", "0\n2\n1 50\n2 10\n", "0\n1\n1\n"):
        Path(path).write_text(text)
        with pytest.raises(CorruptCheckpointError):
            read_leader_epoch_checkpoint(fs, path)
