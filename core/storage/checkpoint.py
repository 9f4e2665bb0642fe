"""Kafka's checkpoint text files: a version line `0`, an entry count, then one entry per line.

Per data dir: `recovery-point-offset-checkpoint` and `log-start-offset-checkpoint`, entries
`topic partition offset`. Per partition dir: `leader-epoch-checkpoint`, entries `epoch offset`.
Files are replaced atomically; a file that does not parse raises CorruptCheckpointError, and the
caller falls back to the safe default (recover everything, start from the first segment).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from rlog.core.storage.files import FileSystem

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
LEADER_EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
_VERSION = "0"

TopicPartition = tuple[str, int]


class CorruptCheckpointError(Exception):
    """A checkpoint file exists but does not parse."""


def read_offset_checkpoint(fs: FileSystem, path: str) -> dict[TopicPartition, int]:
    """Offsets by (topic, partition); an absent file is empty."""
    offsets: dict[TopicPartition, int] = {}
    for topic, partition, offset in _read_entries(fs, path, fields_per_entry=3):
        key = (topic, _to_count(path, partition))
        if key in offsets:
            raise CorruptCheckpointError(f"{path}: {topic}-{partition} appears twice")
        offsets[key] = _to_count(path, offset)
    return offsets


def write_offset_checkpoint(
    fs: FileSystem, path: str, offsets: Mapping[TopicPartition, int]
) -> None:
    lines = [f"{topic} {partition} {offset}" for (topic, partition), offset in offsets.items()]
    _write_entries(fs, path, lines)


def read_leader_epoch_checkpoint(fs: FileSystem, path: str) -> list[tuple[int, int]]:
    """(epoch, start offset) pairs, epochs increasing; an absent file is empty."""
    entries: list[tuple[int, int]] = []
    for epoch_text, offset_text in _read_entries(fs, path, fields_per_entry=2):
        epoch = _to_count(path, epoch_text)
        offset = _to_count(path, offset_text)
        if entries and (epoch <= entries[-1][0] or offset < entries[-1][1]):
            raise CorruptCheckpointError(f"{path}: entry {epoch} {offset} goes backwards")
        entries.append((epoch, offset))
    return entries


def write_leader_epoch_checkpoint(
    fs: FileSystem, path: str, entries: Sequence[tuple[int, int]]
) -> None:
    _write_entries(fs, path, [f"{epoch} {offset}" for epoch, offset in entries])


def _write_entries(fs: FileSystem, path: str, lines: list[str]) -> None:
    text = "\n".join([_VERSION, str(len(lines)), *lines]) + "\n"
    fs.replace_atomically(path, text.encode())


def _read_entries(fs: FileSystem, path: str, *, fields_per_entry: int) -> list[list[str]]:
    if not fs.exists(path):
        return []
    try:
        lines = fs.read_bytes(path).decode("utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise CorruptCheckpointError(f"{path}: not text: {exc}") from None
    if lines and lines[-1] == "":
        lines.pop()  # the newline ending the last line
    if len(lines) < 2 or lines[0] != _VERSION:
        raise CorruptCheckpointError(f"{path}: expected version {_VERSION} and a count")
    count = _to_count(path, lines[1])
    if count != len(lines) - 2:
        raise CorruptCheckpointError(f"{path}: count {count} but {len(lines) - 2} entries")
    entries = [line.split(" ") for line in lines[2:]]
    for entry in entries:
        if len(entry) != fields_per_entry or not all(entry):
            raise CorruptCheckpointError(f"{path}: malformed entry {' '.join(entry)!r}")
    return entries


def _to_count(path: str, text: str) -> int:
    """A non-negative decimal integer: every number these files hold."""
    if not (text.isascii() and text.isdigit()):
        raise CorruptCheckpointError(f"{path}: {text!r} is not a non-negative integer")
    return int(text)
