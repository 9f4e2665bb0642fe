"""The event journal: per-process JSON-lines files merged by time, torn lines tolerated; the
controller's events for committed metadata records; and `rlog events` over such files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from rlog.cli.app import main as rlog_main
from rlog.core.broker import BrokerConfig, BrokerCore
from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.records import (
    NO_LEADER,
    ChangePartition,
    CreatePartition,
    CreateTopic,
    FenceBroker,
    MetadataRecord,
    RegisterBroker,
    UnfenceBroker,
)
from rlog.core.replication import Truncated
from rlog.core.storage.files import RealFileSystem
from rlog.daemon.broker.core_driver import BrokerDriver
from rlog.daemon.controller.record_events import Event, record_events
from rlog.daemon.events import (
    KINDS,
    EventJournal,
    EventTail,
    follow_events,
    journal_path,
    read_events,
)


def _write_lines(path: Path, events: list[dict], tail: bytes = b"") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    body = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    path.write_bytes(body + tail)


def _event(ts: float, source: str, kind: str = "process_started") -> dict:
    return {"ts": ts, "source": source, "kind": kind, "message": f"{source} at {ts}"}


# -- writing and reading ----------------------------------------------------------------------


def test_a_journal_appends_one_json_line_per_event(tmp_path: Path) -> None:
    journal = EventJournal(journal_path(tmp_path, "broker-2"), "broker-2")
    written = journal.record("replica_truncated", "truncated t-0 to 5", topic="t", offset=5)
    journal.record("replica_truncated", "again", ts=0, source="x")  # reserved keys stay
    journal.close()
    path = tmp_path / "events" / "broker-2.jsonl"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    lines = path.read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])
    assert first == written
    assert first["source"] == "broker-2" and first["kind"] == "replica_truncated"
    assert first["topic"] == "t" and first["offset"] == 5 and isinstance(first["ts"], float)
    second = json.loads(lines[1])
    assert second["ts"] > 0 and second["source"] == "broker-2"


def test_read_events_merges_every_file_by_time_and_skips_torn_lines(tmp_path: Path) -> None:
    events = tmp_path / "events"
    _write_lines(events / "rlogd.jsonl", [_event(1.0, "rlogd"), _event(4.0, "rlogd")])
    _write_lines(
        events / "controller.jsonl",
        [_event(2.0, "controller"), _event(5.0, "controller")],
        tail=b'{"ts": 6.0, "source": "contr',  # the controller died mid-write
    )
    _write_lines(events / "broker-1.jsonl", [_event(3.0, "broker-1")], tail=b"not json\n")
    (events / "notes.txt").write_text("not a journal\n")
    merged = read_events(tmp_path)
    assert [(e["ts"], e["source"]) for e in merged] == [
        (1.0, "rlogd"),
        (2.0, "controller"),
        (3.0, "broker-1"),
        (4.0, "rlogd"),
        (5.0, "controller"),
    ]
    assert [e["ts"] for e in read_events(tmp_path, since_ts=3.0)] == [3.0, 4.0, 5.0]
    assert read_events(tmp_path / "nowhere") == []


def test_a_new_writer_ends_a_torn_line_so_its_events_survive(tmp_path: Path) -> None:
    path = journal_path(tmp_path, "controller")
    _write_lines(path, [_event(1.0, "controller")], tail=b'{"ts": 2.0, "sou')
    journal = EventJournal(path, "controller")
    journal.record("broker_fenced", "broker 1 fenced", broker=1)
    journal.close()
    kinds = [e["kind"] for e in read_events(tmp_path)]
    assert kinds == ["process_started", "broker_fenced"]


def test_a_tail_returns_whole_new_lines_once_and_finds_new_files(tmp_path: Path) -> None:
    path = journal_path(tmp_path, "rlogd")
    _write_lines(path, [_event(1.0, "rlogd")])
    tail = EventTail(tmp_path)
    assert [e["ts"] for e in tail.poll()] == [1.0]
    assert tail.poll() == []
    with open(path, "ab") as journal:
        journal.write(json.dumps(_event(2.0, "rlogd")).encode() + b'\n{"ts": 3.0, "so')
    assert [e["ts"] for e in tail.poll()] == [2.0]  # the half-written line waits
    with open(path, "ab") as journal:
        journal.write(b'urce": "rlogd", "kind": "process_exited", "message": "m"}\n')
    _write_lines(journal_path(tmp_path, "broker-1"), [_event(2.5, "broker-1")])
    assert [(e["ts"], e["source"]) for e in tail.poll()] == [(2.5, "broker-1"), (3.0, "rlogd")]
    path.write_bytes(b"")  # purged and started again
    _write_lines(path, [_event(9.0, "rlogd")])
    assert [e["ts"] for e in tail.poll()] == [9.0]


def test_follow_events_yields_history_then_new_events(tmp_path: Path) -> None:
    journal = EventJournal(journal_path(tmp_path, "rlogd"), "rlogd")
    journal.record("rlogd_started", "first")
    stream = follow_events(tmp_path, poll_interval_s=0.01)
    assert next(stream)["message"] == "first"
    journal.record("process_started", "second")
    assert next(stream)["message"] == "second"
    stream.close()
    journal.close()


def test_a_journal_that_cannot_be_written_does_not_raise(tmp_path: Path) -> None:
    blocker = tmp_path / "events"
    blocker.write_text("a file where the directory should be")
    journal = EventJournal(blocker / "rlogd.jsonl", "rlogd")
    assert journal.record("rlogd_started", "lost")["kind"] == "rlogd_started"
    journal.close()


# -- the controller's events ------------------------------------------------------------------


def _image(records: list[MetadataRecord]) -> MetadataImage:
    image = MetadataImage()
    for offset, record in enumerate(records):
        image.apply(offset, record)
    return image


def _three_brokers_one_partition() -> MetadataImage:
    records: list[MetadataRecord] = []
    for broker in (1, 2, 3):
        records.append(
            RegisterBroker(broker, f"inc-{broker}", len(records), "h", 9000 + broker, None)
        )
    for broker in (1, 2, 3):
        records.append(UnfenceBroker(broker, broker - 1))
    records.append(CreateTopic("t", "0" * 32, {}))
    records.append(CreatePartition("t", 0, (1, 2, 3), (1, 2, 3), 1, 0, 0))
    return _image(records)


def _kinds(events: list[Event]) -> list[str]:
    return [event.kind for event in events]


def test_fencing_a_leader_journals_the_fence_then_the_election_and_the_shrink() -> None:
    image = _three_brokers_one_partition()
    moves = ChangePartition("t", 0, 2, (2, 3), 1, 1, "broker 1 fenced: session expired")
    events = record_events(image, [moves, FenceBroker(1, 0)])
    assert _kinds(events) == ["broker_fenced", "leader_elected", "isr_shrunk"]
    elected = events[1].fields
    assert (elected["leader"], elected["previous_leader"], elected["leader_epoch"]) == (2, 1, 1)
    assert elected["reason"] == "broker 1 fenced: session expired"
    shrunk = events[2].fields
    assert (shrunk["isr"], shrunk["previous_isr"], shrunk["removed"]) == ([2, 3], [1, 2, 3], [1])


def test_a_registration_of_a_live_broker_fences_it() -> None:
    image = _three_brokers_one_partition()
    moves = ChangePartition("t", 0, 2, (2, 3), 1, 1, "broker 1 re-registers")
    register = RegisterBroker(1, "inc-new", 9, "h", 9001, None)
    events = record_events(image, [moves, register])
    assert _kinds(events) == ["broker_fenced", "leader_elected", "isr_shrunk", "broker_registered"]


def test_isr_changes_within_one_batch_compare_with_the_change_before() -> None:
    image = _three_brokers_one_partition()
    shrink = ChangePartition("t", 0, None, (1, 2), 0, 1, "AlterPartition from leader 1")
    expand = ChangePartition("t", 0, None, (1, 2, 3), 0, 2, "AlterPartition from leader 1")
    events = record_events(image, [shrink, expand])
    assert _kinds(events) == ["isr_shrunk", "isr_expanded"]
    assert events[1].fields["previous_isr"] == [1, 2] and events[1].fields["added"] == [3]


def test_offline_and_unclean_elections() -> None:
    image = _three_brokers_one_partition()
    offline = ChangePartition("t", 0, NO_LEADER, (1,), 1, 1, "broker 2 fenced")
    unclean = ChangePartition("t", 0, 3, (3,), 2, 2, "unclean election", unclean=True)
    events = record_events(image, [offline, unclean])
    assert _kinds(events) == [
        "partition_offline",
        "isr_shrunk",
        "leader_elected",
        "unclean_election",
        "isr_shrunk",
        "isr_expanded",
    ]
    assert events[3].fields["unclean"] is True and events[3].fields["leader"] == 3


def test_every_kind_the_code_emits_is_declared() -> None:
    image = _three_brokers_one_partition()
    events = record_events(image, [CreateTopic("u", "1" * 32, {"a": "b"})])
    assert {event.kind for event in events} <= set(KINDS)


# -- rlog events ------------------------------------------------------------------------------


@pytest.fixture
def journaled(tmp_path: Path) -> Path:
    events = tmp_path / "events"
    _write_lines(events / "rlogd.jsonl", [_event(1_700_000_000.5, "rlogd", "process_exited")])
    _write_lines(
        events / "controller.jsonl", [_event(1_700_000_001.25, "controller", "leader_elected")]
    )
    return tmp_path


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    env = {k: os.environ.pop(k) for k in list(os.environ) if k.startswith("RLOG_")}
    try:
        code = rlog_main(["--color", "never", *args])
    finally:
        os.environ.update(env)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_rlog_events_prints_a_line_per_event_oldest_first(journaled: Path, capsys) -> None:
    code, out, err = _run(capsys, "events", "--data-dir", str(journaled))
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0].split() == ["TIME", "SOURCE", "KIND", "MESSAGE"]
    assert "rlogd" in lines[1] and "process_exited" in lines[1]
    assert "controller" in lines[2] and "leader_elected" in lines[2]
    assert lines[1].index("process_exited") == lines[2].index("leader_elected")


def test_rlog_events_json_and_kind_filter(journaled: Path, capsys) -> None:
    code, out, _ = _run(
        capsys, "events", "--data-dir", str(journaled), "--json", "--kind", "leader_elected"
    )
    assert code == 0
    assert [json.loads(line)["kind"] for line in out.splitlines()] == ["leader_elected"]
    code, out, _ = _run(capsys, "events", "--data-dir", str(journaled), "--since", "1h")
    assert code == 0 and out == ""  # those events are from 2023


def test_rlog_events_errors_are_one_line(tmp_path: Path, capsys) -> None:
    code, out, err = _run(capsys, "events", "--data-dir", str(tmp_path / "none"))
    assert code == 3 and out == "" and len(err.splitlines()) == 1
    assert err.startswith("rlog: error: no rlog cluster has run in")
    code, _, err = _run(capsys, "events", "--data-dir", str(tmp_path), "--kind", "nope")
    assert code == 2 and len(err.splitlines()) == 1
    code, _, err = _run(capsys, "events", "--data-dir", str(tmp_path), "--since", "soon")
    assert code == 2 and "--since" in err


def test_a_broker_journals_its_truncated_replicas(tmp_path: Path) -> None:
    core = BrokerCore(BrokerConfig(2), str(tmp_path / "broker-2"), RealFileSystem(), 0)
    driver = BrokerDriver(core)
    driver.record_truncation(Truncated("t", 0, 7))  # no journal: nothing written, no error
    driver.journal = EventJournal(journal_path(tmp_path, "broker-2"), "broker-2")
    driver.record_truncation(Truncated("t", 0, 5))
    driver.record_truncation(Truncated("u", 1, 0, full=True))
    driver.journal.close()
    driver.close()
    events = read_events(tmp_path)
    assert [(e["kind"], e["topic"], e["partition"], e["offset"]) for e in events] == [
        ("replica_truncated", "t", 0, 5),
        ("replica_truncated", "u", 1, 0),
    ]
    assert events[0]["source"] == "broker-2" and events[0]["broker"] == 2
    assert events[1]["full"] is True and "truncated u-1 to offset 0" in events[1]["message"]
