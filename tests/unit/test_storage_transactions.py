"""The log's producer state on disk: snapshots at rolls, rebuilds after restarts and truncations,
the aborted-transaction index, and the last stable offset read_committed consumers stop at."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlog.core.producer_state import BatchMetadata, ProducerEntry, ProducerStateError
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import ControlType, build_batch, build_end_txn_marker, read_header
from rlog.core.replication.local import LocalReplica
from rlog.core.replication.messages import ReplicaConfig
from rlog.core.storage.config import LogConfig
from rlog.core.storage.files import RealFileSystem
from rlog.core.storage.leader_epochs import LeaderEpochCache
from rlog.core.storage.log import Log
from rlog.core.storage.producer_snapshot import (
    CorruptSnapshotError,
    decode_snapshot,
    encode_snapshot,
    list_snapshots,
    snapshot_path,
)
from rlog.core.storage.txn_index import ENTRY, AbortedTxn, parse_entries

SMALL_SEGMENTS = LogConfig(segment_bytes=400)


def _open(path: Path, config: LogConfig = SMALL_SEGMENTS, recovery_point: int = 0) -> Log:
    return Log(
        str(path),
        config,
        RealFileSystem(),
        recovery_point=recovery_point,
        log_start_offset=0,
        now_ms=0,
    )


def _batch(
    pid: int, sequence: int, count: int = 1, *, epoch: int = 0, txn: bool = False, ts: int = 0
) -> bytes:
    records = [(b"k", b"v%d" % (sequence + i)) for i in range(count)]
    return build_batch(
        records,
        base_timestamp=ts,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=sequence,
        is_transactional=txn,
    )


def _marker(pid: int, *, commit: bool, epoch: int = 0, coordinator_epoch: int = 0) -> bytes:
    return build_end_txn_marker(
        ControlType.COMMIT if commit else ControlType.ABORT,
        producer_id=pid,
        producer_epoch=epoch,
        coordinator_epoch=coordinator_epoch,
        timestamp_ms=0,
    )


# ---- the snapshot file format ----


def test_a_snapshot_entry_is_kafkas_layout() -> None:
    entry = ProducerEntry(7, 3, coordinator_epoch=2, current_txn_first_offset=40, last_timestamp=99)
    entry.batches.append(BatchMetadata(5, 9, 50, 54, 99))
    data = encode_snapshot([entry])
    version, _crc, count = struct.unpack_from(">hIi", data)
    assert (version, count) == (1, 1)
    assert data[10:] == struct.pack(">qhiqiqiq", 7, 3, 9, 54, 4, 99, 2, 40)
    (back,) = decode_snapshot(data)
    assert (back.producer_id, back.epoch, back.last_sequence, back.current_txn_first_offset) == (
        7,
        3,
        9,
        40,
    )
    assert back.batches[-1].first_offset == 50 and back.batches[-1].first_sequence == 5


def test_a_damaged_snapshot_is_refused() -> None:
    data = bytearray(encode_snapshot([ProducerEntry(1, 0)]))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(bytes(data))
    with pytest.raises(CorruptSnapshotError):
        decode_snapshot(b"\x00\x01")


# ---- snapshots at roll, rebuild on restart ----


def test_a_roll_snapshots_the_producers_and_a_restart_replays_only_after_it(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path)
    sequence = 0
    while len(log.segments) < 3:
        log.append(_batch(1, sequence, 2), 0)
        sequence += 2
    assert list_snapshots(RealFileSystem(), str(tmp_path)) == [
        s.base_offset for s in log.segments[1:]
    ]
    log.flush()
    log.close()
    reopened = _open(tmp_path, recovery_point=log.log_end_offset)
    assert reopened.producer_replay_start == reopened.segments[-1].base_offset
    entry = reopened.producers.entry(1)
    assert entry is not None and entry.last_sequence == sequence - 1
    # The next batch must continue the sequence; a retry of the last one is a duplicate.
    assert reopened.producers.check(read_header(_batch(1, sequence - 2, 2))) is not None
    with pytest.raises(ProducerStateError) as refused:
        reopened.producers.check(read_header(_batch(1, sequence + 5)))
    assert refused.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_a_producer_whose_batches_are_gone_keeps_its_state_through_the_snapshot(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path)
    log.append(_batch(1, 0, 3), 0)
    while len(log.segments) < 3:
        log.append(build_batch([(b"k", b"x" * 40)]), 0)  # no producer
    log.advance_log_start_offset(log.segments[1].base_offset)  # producer 1's batch is gone
    log.flush()
    log.close()
    reopened = _open(tmp_path, recovery_point=log.log_end_offset)
    entry = reopened.producers.entry(1)
    assert entry is not None and entry.last_sequence == 2


def test_a_torn_snapshot_falls_back_to_replaying_the_log(tmp_path: Path) -> None:
    log = _open(tmp_path)
    sequence = 0
    while len(log.segments) < 2:
        log.append(_batch(1, sequence), 0)
        sequence += 1
    log.flush()
    log.close()
    for offset in list_snapshots(RealFileSystem(), str(tmp_path)):
        Path(snapshot_path(str(tmp_path), offset)).write_bytes(b"\x00\x01garbage")
    reopened = _open(tmp_path, recovery_point=log.log_end_offset)
    assert reopened.producer_replay_start == 0
    entry = reopened.producers.entry(1)
    assert entry is not None and entry.last_sequence == sequence - 1
    assert list_snapshots(RealFileSystem(), str(tmp_path)) == []  # the damaged ones are gone


def test_truncation_drops_later_snapshots_and_rewinds_the_producer_state(tmp_path: Path) -> None:
    log = _open(tmp_path)
    sequence = 0
    while len(log.segments) < 3:
        log.append(_batch(1, sequence), 0)
        sequence += 1
    cut = log.segments[1].base_offset + 1
    log.truncate_to(cut)
    assert all(s <= cut for s in list_snapshots(RealFileSystem(), str(tmp_path)))
    entry = log.producers.entry(1)
    assert entry is not None and entry.last_sequence == cut - 1  # one record per batch
    assert log.producers.end_offset == cut


# ---- transactions: the open ones, the LSO, the aborted index ----


def _replica(log: Log, high_watermark: int = 0) -> LocalReplica:
    epochs = LeaderEpochCache.load(
        RealFileSystem(), log.dir_path, [], log_start_offset=0, log_end_offset=log.log_end_offset
    )
    return LocalReplica(
        "t", 0, 1, log, epochs, ReplicaConfig(min_insync_replicas=1),
        high_watermark=high_watermark,
    )  # fmt: skip


def test_the_lso_stops_at_an_open_transaction_until_its_marker_is_replicated(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path, LogConfig())
    replica = _replica(log)
    log.append(_batch(1, 0), 0)  # offset 0, not transactional
    log.append(_batch(2, 0, 2, txn=True), 0)  # offsets 1-2: producer 2's transaction
    log.append(_batch(1, 1), 0)  # offset 3
    replica.raise_high_watermark(4)
    assert replica.last_stable_offset == 1
    log.append(_marker(2, commit=True), 0)  # offset 4
    assert replica.last_stable_offset == 1  # the ISR does not hold the marker yet
    replica.raise_high_watermark(5)
    assert replica.last_stable_offset == 5


def test_an_abort_is_indexed_in_its_markers_segment_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    log = _open(tmp_path, LogConfig())
    log.append(_batch(2, 0, 2, txn=True), 0)  # 0-1
    log.append(_batch(3, 0, 1, txn=True), 0)  # 2
    log.append(_marker(2, commit=False), 0)  # 3: producer 2 aborted
    log.append(_marker(3, commit=True), 0)  # 4
    aborted = log.aborted_transactions(0, log.log_end_offset)
    assert aborted == [AbortedTxn(2, 0, 3, 2)]  # LSO after it: producer 3's open transaction
    assert log.aborted_transactions(4, 5) == []  # ended before the fetch offset
    log.flush()
    log.close()
    index_file = Path(tmp_path) / f"{0:020d}.txnindex"
    assert parse_entries(index_file.read_bytes()) == [AbortedTxn(2, 0, 3, 2)]
    assert index_file.stat().st_size == ENTRY.size
    reopened = _open(tmp_path, LogConfig(), recovery_point=log.log_end_offset)
    assert reopened.aborted_transactions(0, 10) == [AbortedTxn(2, 0, 3, 2)]


def test_the_aborted_index_is_rebuilt_when_the_crash_lost_it(tmp_path: Path) -> None:
    log = _open(tmp_path, LogConfig())
    log.append(_batch(2, 0, 2, txn=True), 0)
    log.append(_marker(2, commit=False), 0)
    log.close()  # no flush: a restart must re-read everything
    os.remove(Path(tmp_path) / f"{0:020d}.txnindex")
    reopened = _open(tmp_path, LogConfig(), recovery_point=0)
    assert reopened.aborted_transactions(0, 10) == [AbortedTxn(2, 0, 2, 3)]


def test_truncating_below_a_marker_reopens_its_transaction(tmp_path: Path) -> None:
    log = _open(tmp_path, LogConfig())
    log.append(_batch(2, 0, 2, txn=True), 0)  # 0-1
    log.append(_marker(2, commit=False), 0)  # 2
    log.truncate_to(2)
    assert log.aborted_transactions(0, 10) == []
    assert log.producers.first_unstable_offset() == 0
    assert log.producers.has_open_transaction(2, 0)


def test_a_marker_from_an_older_coordinator_or_producer_epoch_is_fenced(tmp_path: Path) -> None:
    log = _open(tmp_path, LogConfig())
    log.append(_batch(2, 0, txn=True, epoch=1), 0)
    log.append(_marker(2, commit=True, epoch=1, coordinator_epoch=5), 0)
    with pytest.raises(ProducerStateError) as fenced:
        log.producers.check_marker(2, 1, 4)
    assert fenced.value.code == ErrorCode.TRANSACTION_COORDINATOR_FENCED
    with pytest.raises(ProducerStateError) as old:
        log.producers.check_marker(2, 0, 5)
    assert old.value.code == ErrorCode.INVALID_PRODUCER_EPOCH


def test_a_non_transactional_batch_during_an_open_transaction_is_refused(tmp_path: Path) -> None:
    log = _open(tmp_path, LogConfig())
    log.append(_batch(2, 0, txn=True), 0)
    with pytest.raises(ProducerStateError) as refused:
        log.producers.check(read_header(_batch(2, 1)))
    assert refused.value.code == ErrorCode.INVALID_TXN_STATE


def test_idle_producers_expire_but_not_those_in_a_transaction(tmp_path: Path) -> None:
    log = _open(tmp_path, LogConfig())
    log.append(_batch(1, 0, ts=1_000), 0)
    log.append(_batch(2, 0, txn=True, ts=1_000), 0)
    log.append(_batch(3, 0, ts=50_000), 0)
    assert sorted(log.producers.expire(now_ms=60_000, expiration_ms=30_000)) == [1]
    assert log.producers.entry(1) is None
    assert log.producers.entry(2) is not None and log.producers.entry(3) is not None


def test_an_abort_whose_marker_rolled_into_the_next_segment_is_listed_for_the_one_before(
    tmp_path: Path,
) -> None:
    """The marker is indexed in its own (later) segment; a fetch that reads only the earlier
    segment must still be told, or a read_committed consumer reads the aborted records. (Found
    by the simulator: the search stopped at the segment end once it had found another abort.)"""
    log = _open(tmp_path, LogConfig(segment_bytes=300))
    log.append(_batch(2, 0, txn=True), 0)  # 0: producer 2's transaction, aborted later
    log.append(_batch(4, 0, txn=True), 0)  # 1: producer 4's
    log.append(_marker(4, commit=False), 0)  # 2: producer 4 aborts, in the first segment
    while len(log.segments) == 1:
        log.append(build_batch([(b"k", b"plain")]), 0)
    log.append(_marker(2, commit=False), 0)  # in the second segment
    first_segment_end = log.segments[0].next_offset
    assert [t.producer_id for t in log.segments[1].txn_index.entries] == [2]
    aborted = log.aborted_transactions(0, first_segment_end)
    assert sorted((t.producer_id, t.first_offset) for t in aborted) == [(2, 0), (4, 1)]


# ---- in-memory copies of the producer state: a truncation replays little ----


def _producer_view(log: Log) -> tuple[object, ...]:
    """Everything a rebuild must get right: entries, open and unreplicated transactions, the
    aborted index. Raises the HW to the LEO to tell open transactions from closed ones."""
    entries = sorted(
        (e.producer_id, e.epoch, tuple(e.batches), e.coordinator_epoch, e.current_txn_first_offset)
        for e in log.producers.entries
    )
    unstable = log.producers.first_unstable_offset()  # closed transactions count: no HW yet
    log.producers.on_high_watermark(log.log_end_offset)
    return (
        entries,
        unstable,
        log.producers.first_unstable_offset(),  # only the open ones
        log.producers.end_offset,
        log.aborted_transactions(0, log.log_end_offset + 1),
    )


@settings(max_examples=60, deadline=None)
@given(
    steps=st.lists(st.tuples(st.integers(0, 2), st.integers(0, 9)), min_size=5, max_size=80),
    cut_back=st.integers(0, 30),
)
def test_a_truncation_from_an_in_memory_copy_equals_a_full_replay(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[int, int]], cut_back: int
) -> None:
    """Copies every 3 batches; random idempotent and transactional traffic; cut somewhere near
    the end; the state must equal a replay of the whole log (what a restart without snapshots
    does)."""
    from rlog.core.storage import log as log_module

    directory = tmp_path_factory.mktemp("marks")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(log_module, "PRODUCER_MARK_BATCHES", 3)
        patch.setattr(log_module, "PRODUCER_MARK_BATCHES_PER_PRODUCER", 0)
        log = _open(directory, LogConfig())
        sequences = {1: 0, 2: 0, 3: 0}
        open_txn: set[int] = set()
        for kind, arg in steps:
            pid = 1 + arg % 3
            if kind == 0 and pid not in open_txn:  # a plain idempotent batch
                log.append(_batch(pid, sequences[pid], 1 + arg % 2), 0)
                sequences[pid] += 1 + arg % 2
            elif kind == 1:  # a transactional batch
                log.append(_batch(pid, sequences[pid], 1, txn=True), 0)
                sequences[pid] += 1
                open_txn.add(pid)
            elif pid in open_txn:  # end it
                log.append(_marker(pid, commit=arg % 2 == 0), 0)
                open_txn.discard(pid)
        cut = max(0, log.log_end_offset - cut_back)
        marks = [m.end_offset for m in log._producer_marks if 0 < m.end_offset <= cut]
        log.truncate_to(cut)
        replayed_from = log.producer_replay_start
        view = _producer_view(log)
    log.close()
    # No snapshot files, no copies: the whole log replayed from its start.
    for offset in list_snapshots(RealFileSystem(), str(directory)):
        os.remove(snapshot_path(str(directory), offset))
    for index in Path(directory).glob("*.txnindex"):
        os.remove(index)
    reopened = _open(directory, LogConfig(), recovery_point=0)
    assert reopened.producer_replay_start == 0
    assert _producer_view(reopened) == view
    if marks and cut < log.log_end_offset + cut_back:  # it cut something: a copy was used
        assert replayed_from == max(marks)


def test_cutting_a_short_tail_replays_from_the_latest_copy_not_the_segment_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from rlog.core.storage import log as log_module

    monkeypatch.setattr(log_module, "PRODUCER_MARK_BATCHES", 8)
    log = _open(tmp_path, LogConfig())  # one segment: no snapshot on disk to start from
    for sequence in range(30):
        log.append(_batch(1, sequence), 0)
    log.truncate_to(29)
    assert log.producer_replay_start == 24  # the copy after batch 24, not offset 0
    entry = log.producers.entry(1)
    assert entry is not None and entry.last_sequence == 28
    log.truncate_to(20)  # below the copies left (24 is gone with the cut): the one at 16
    assert log.producer_replay_start == 16
