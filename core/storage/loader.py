"""Startup recovery of one partition directory, kept apart from the running path.

A segment whose batches all lie below the recovery point was fsync'd whole; it is opened cheaply
(index checks plus a walk of the headers after the last index entry). Any other segment, and any
segment whose files fail those checks, is recovered: every batch CRC-checked, the file cut at the
first torn or corrupt one, the indexes rebuilt. Segments after a cut are deleted, since their
offsets could no longer follow on. Nothing before the damage is lost.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from rlog.core.records import CorruptRecordError
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import TMP_SUFFIX, FileSystem
from rlog.core.storage.index import CorruptIndexError
from rlog.core.storage.segment import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    LogSegment,
    segment_file_name,
)

# The log cleaner's suffixes (cleaner.py): a segment is written as `.cleaned` files, renamed to
# `.swap` (the `.log.swap` rename is the commit point), then to the live names.
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
# Leftovers of an interrupted operation: Kafka's deletion, cleaning and swap suffixes, and files
# replace_atomically did not finish. Committed swaps are completed before these go.
LEFTOVER_SUFFIXES = (".deleted", CLEANED_SUFFIX, SWAP_SUFFIX, TMP_SUFFIX)
INDEX_SUFFIXES = (INDEX_SUFFIX, TIME_INDEX_SUFFIX, ".txnindex")
_BASE_OFFSET_DIGITS = 20


@dataclass(frozen=True, slots=True)
class RecoverySummary:
    recovered_segments: int = 0  # segments whose batches were all re-read and checked
    truncated_bytes: int = 0  # bytes cut from torn or corrupt tails
    deleted_segments: int = 0  # segments dropped after the damage (or after a gap)


@dataclass(frozen=True, slots=True)
class LoadedLog:
    segments: list[LogSegment]
    recovery_point: int
    log_start_offset: int
    summary: RecoverySummary


def load_log(
    fs: FileSystem,
    dir_path: str,
    config: LogConfig,
    *,
    recovery_point: int,
    log_start_offset: int,
    now_ms: int,
) -> LoadedLog:
    fs.makedirs(dir_path)
    base_offsets, indexed = _list_segments(fs, dir_path, config, now_ms)
    if not base_offsets:
        segment = LogSegment.create(fs, dir_path, log_start_offset, config)
        return LoadedLog([segment], log_start_offset, log_start_offset, RecoverySummary())
    segments: list[LogSegment] = []
    recovered = truncated_bytes = deleted = 0
    damaged = False
    for base_offset in base_offsets:
        if damaged or (segments and base_offset != segments[-1].next_offset):
            LogSegment.open(fs, dir_path, base_offset, config).delete()
            damaged = True
            deleted += 1
            continue
        segment = LogSegment.open(fs, dir_path, base_offset, config)
        trusted = base_offset <= recovery_point and base_offset in indexed
        if trusted:
            try:
                segment.load(now_ms)
            except (CorruptIndexError, CorruptRecordError):
                trusted = False
            else:
                trusted = segment.next_offset <= recovery_point
        if not trusted:
            cut_bytes = segment.recover(now_ms)
            recovered += 1
            truncated_bytes += cut_bytes
            damaged = cut_bytes > 0
        segments.append(segment)
    log_end_offset = segments[-1].next_offset
    first_offset = segments[0].base_offset
    return LoadedLog(
        segments,
        recovery_point=min(max(recovery_point, first_offset), log_end_offset),
        log_start_offset=min(max(log_start_offset, first_offset), log_end_offset),
        summary=RecoverySummary(recovered, truncated_bytes, deleted),
    )


def _list_segments(
    fs: FileSystem, dir_path: str, config: LogConfig, now_ms: int
) -> tuple[list[int], set[int]]:
    """Base offsets of the `.log` files, sorted, and those that have both index files.

    Removes leftovers and index files whose `.log` is gone.
    """
    _finish_swaps(fs, dir_path, config, now_ms)
    names = fs.listdir(dir_path)
    log_bases: set[int] = set()
    index_files: dict[int, set[str]] = {}
    for name in names:
        if name.endswith(LEFTOVER_SUFFIXES):
            fs.remove(os.path.join(dir_path, name))
            continue
        stem, suffix = os.path.splitext(name)
        if not _is_base_offset(stem):
            continue  # not a segment file: checkpoints, partition metadata
        if suffix == LOG_SUFFIX:
            log_bases.add(int(stem))
        elif suffix in INDEX_SUFFIXES:
            index_files.setdefault(int(stem), set()).add(suffix)
    for base_offset, suffixes in index_files.items():
        if base_offset not in log_bases:
            for suffix in suffixes:
                fs.remove(os.path.join(dir_path, segment_file_name(base_offset, suffix)))
    indexed = {
        base_offset
        for base_offset, suffixes in index_files.items()
        if {INDEX_SUFFIX, TIME_INDEX_SUFFIX} <= suffixes
    }
    return sorted(log_bases), indexed


def _finish_swaps(fs: FileSystem, dir_path: str, config: LogConfig, now_ms: int) -> None:
    """Complete the cleaner's swaps that reached their commit point (a `.log.swap` exists):
    delete the old segments inside the new segment's offsets, then give the new one its live
    names, indexes first, as Log.replace_segments does. Its indexes are rebuilt on the way (some
    may already have been renamed). Any other `.swap` or `.cleaned` file is a leftover.
    """
    names = fs.listdir(dir_path)
    committed = sorted(
        int(name.split(".")[0])
        for name in names
        if name.endswith(LOG_SUFFIX + SWAP_SUFFIX) and _is_base_offset(name.split(".")[0])
    )
    if not committed:
        return
    live_bases = sorted(
        int(name[: -len(LOG_SUFFIX)])
        for name in names
        if name.endswith(LOG_SUFFIX) and _is_base_offset(name[: -len(LOG_SUFFIX)])
    )
    for base_offset in committed:
        segment = LogSegment.open(fs, dir_path, base_offset, config, swap_suffix=SWAP_SUFFIX)
        segment.recover(now_ms)  # its end, and indexes that match it
        for inner in live_bases:
            if base_offset < inner < segment.next_offset:
                LogSegment.open(fs, dir_path, inner, config).delete()
        fs.sync_dir(dir_path)
        segment.rename_files("")
        segment.close()
    fs.sync_dir(dir_path)


def _is_base_offset(stem: str) -> bool:
    return len(stem) == _BASE_OFFSET_DIGITS and stem.isascii() and stem.isdigit()
