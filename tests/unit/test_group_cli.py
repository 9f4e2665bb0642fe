"""``rlog group`` and ``rlog consume --group`` without a broker: reset planning (with Kafka's
clamping), datetime and duration parsing, describe rows and lag, and the flag checks that
must fail before any connection is tried."""

from __future__ import annotations

import os
import signal
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupState, Message, TopicPartition
from typer.testing import CliRunner

from rlog.cli import app as cli_app
from rlog.cli.consume import (
    GroupMember,
    deferred_interrupt,
    group_offset_reset,
    next_offsets,
    parse_offset,
)
from rlog.cli.group import (
    DESCRIBE_HEADERS,
    GroupView,
    MemberView,
    PartitionOffsets,
    ResetError,
    ResetSpec,
    clamp_note,
    describe_document,
    group_note,
    idle_member_rows,
    lag_rows,
    live_members_error,
    parse_datetime_ms,
    parse_duration_ms,
    parse_topic_partitions,
    plan_reset,
    reset_spec,
    state_name,
)
from rlog.cli.terminal import CliError, ExitCode, Terminal

# -- reset planning ---------------------------------------------------------------------


def _partitions() -> list[PartitionOffsets]:
    """p0: log 10..100, committed 50; p1: log 0..20, no commit; p2: empty log 5..5, commit 5."""
    return [
        PartitionOffsets("t", 1, log_start=0, log_end=20, committed=None, at_timestamp=None),
        PartitionOffsets("t", 0, log_start=10, log_end=100, committed=50, at_timestamp=42),
        PartitionOffsets("t", 2, log_start=5, log_end=5, committed=5, at_timestamp=None),
    ]


def _new(spec: ResetSpec, partitions: list[PartitionOffsets] | None = None) -> list[int]:
    return [p.new_offset for p in plan_reset("g", spec, partitions or _partitions())]


def test_plan_is_sorted_by_partition_and_keeps_the_current_offset() -> None:
    plans = plan_reset("g", ResetSpec("earliest"), _partitions())
    assert [(p.group, p.topic, p.partition) for p in plans] == [
        ("g", "t", 0),
        ("g", "t", 1),
        ("g", "t", 2),
    ]
    assert [p.current_offset for p in plans] == [50, None, 5]
    assert plans[0].cells() == ("g", "t", 0, 10)
    assert plans[0].as_json() == {
        "group": "g",
        "topic": "t",
        "partition": 0,
        "current_offset": 50,
        "new_offset": 10,
    }


def test_earliest_latest_current() -> None:
    assert _new(ResetSpec("earliest")) == [10, 0, 5]
    assert _new(ResetSpec("latest")) == [100, 20, 5]
    # --to-current without a committed offset takes the log end, as Kafka does
    assert _new(ResetSpec("current")) == [50, 20, 5]


def test_to_offset_is_clamped_into_the_log() -> None:
    plans = plan_reset("g", ResetSpec("offset", 15), _partitions())
    assert [p.new_offset for p in plans] == [15, 15, 5]
    assert [p.clamped for p in plans] == [False, False, True]
    assert _new(ResetSpec("offset", 0)) == [10, 0, 5]
    assert _new(ResetSpec("offset", 10_000)) == [100, 20, 5]


def test_shift_by_clamps_both_ways() -> None:
    parts = [p for p in _partitions() if p.committed is not None]
    assert _new(ResetSpec("shift", -5), parts) == [45, 5]
    assert _new(ResetSpec("shift", -1000), parts) == [10, 5]  # not below the log start
    assert _new(ResetSpec("shift", 1000), parts) == [100, 5]  # not above the log end
    low = plan_reset("g", ResetSpec("shift", -1000), parts)[0]
    assert (low.requested, low.new_offset, low.clamped) == (-950, 10, True)
    assert "lower than earliest" in clamp_note(low) and "set to 10" in clamp_note(low)
    high = plan_reset("g", ResetSpec("shift", 1000), parts)[0]
    assert "higher than latest" in clamp_note(high) and "(1050)" in clamp_note(high)


def test_shift_by_needs_a_committed_offset() -> None:
    with pytest.raises(ResetError, match=r"t partition 1 .*'g'.*no committed offset"):
        plan_reset("g", ResetSpec("shift", 1), _partitions())


def test_to_datetime_takes_the_offset_for_the_time_or_the_log_end() -> None:
    assert _new(ResetSpec("timestamp", 1_700_000_000_000)) == [42, 20, 5]


# -- strategy flags, datetimes, durations -------------------------------------------------


def test_exactly_one_strategy() -> None:
    with pytest.raises(ValueError, match=r"exactly one of .*got none"):
        reset_spec()
    with pytest.raises(ValueError, match=r"got --to-earliest, --shift-by"):
        reset_spec(to_earliest=True, shift_by=-1)
    with pytest.raises(ValueError, match=r"--to-offset must be >= 0"):
        reset_spec(to_offset=-1)
    assert reset_spec(to_latest=True) == ResetSpec("latest")
    assert reset_spec(to_current=True) == ResetSpec("current")
    assert reset_spec(to_offset=0) == ResetSpec("offset", 0)
    assert reset_spec(shift_by=-3) == ResetSpec("shift", -3)
    assert reset_spec(to_datetime="1700000000000") == ResetSpec("timestamp", 1_700_000_000_000)
    assert reset_spec(by_duration="PT1M", now_ms=1_000_000) == ResetSpec("timestamp", 940_000)


def test_parse_datetime() -> None:
    utc = datetime(2026, 1, 31, 12, 0, 0, 250_000, tzinfo=UTC)
    expected = int(utc.timestamp() * 1000)
    assert parse_datetime_ms("2026-01-31T12:00:00.250Z") == expected
    assert parse_datetime_ms("2026-01-31T14:00:00.250+02:00") == expected
    assert parse_datetime_ms("2026-01-31T12:00:00.250+00:00") == expected
    naive = datetime(2026, 1, 31, 12, 0, 0).astimezone()  # no zone: local time, as Kafka
    assert parse_datetime_ms("2026-01-31T12:00:00") == int(naive.timestamp() * 1000)
    assert parse_datetime_ms("1700000000123") == 1_700_000_000_123
    for bad in ("yesterday", "2026-13-01T00:00:00", "", "12:00"):
        with pytest.raises(ValueError, match="bad datetime"):
            parse_datetime_ms(bad)


def test_parse_duration() -> None:
    assert parse_duration_ms("PT30M") == 30 * 60_000
    assert parse_duration_ms("P1DT2H") == int(timedelta(days=1, hours=2).total_seconds() * 1000)
    assert parse_duration_ms("PT1.5S") == 1500
    assert parse_duration_ms("pt10s") == 10_000
    assert parse_duration_ms("P2D") == 2 * 86_400_000
    assert parse_duration_ms("-PT1M") == -60_000
    for bad in ("P", "PT", "P1DT", "30m", "1h", "PT-1M", ""):
        with pytest.raises(ValueError, match="bad duration"):
            parse_duration_ms(bad)


def test_topic_and_partitions() -> None:
    assert parse_topic_partitions("orders", None) == ("orders", [])
    assert parse_topic_partitions("orders", [2, 0, 2]) == ("orders", [0, 2])
    assert parse_topic_partitions("orders:0,1", [3]) == ("orders", [0, 1, 3])
    for bad in ("orders:", "orders:x", ":1"):
        with pytest.raises(ValueError, match="bad --topic"):
            parse_topic_partitions(bad, None)


# -- describe rows ----------------------------------------------------------------------

MEMBER = MemberView("rlog-consumer-1a2b", "rlog-consumer", "/127.0.0.1", (("t", 1), ("u", 0)))


def test_lag_rows_union_of_commits_and_assignments() -> None:
    committed = {("t", 0): 7, ("t", 1): 3, ("t", 2): None, ("t", 3): -1}
    log_ends = {("t", 0): 10, ("t", 1): 3, ("u", 0): 5}
    rows = lag_rows("g", committed, log_ends, [MEMBER])
    assert [r.cells() for r in rows] == [
        ("g", "t", 0, 7, 10, 3, None, None, None),
        ("g", "t", 1, 3, 3, 0, "rlog-consumer-1a2b", "/127.0.0.1", "rlog-consumer"),
        ("g", "u", 0, None, 5, None, "rlog-consumer-1a2b", "/127.0.0.1", "rlog-consumer"),
    ]
    assert len(DESCRIBE_HEADERS) == len(rows[0].cells())


def test_a_committed_earliest_is_a_row_lagging_from_the_log_start() -> None:
    committed = {("t", 0): -2, ("t", 1): -2, ("t", 2): -1}
    log_ends = {("t", 0): 10, ("t", 1): 4}
    rows = lag_rows("g", committed, log_ends, [], {("t", 0): 3, ("t", 1): None})
    assert [r.cells() for r in rows] == [
        ("g", "t", 0, None, 10, 7, None, None, None),
        ("g", "t", 1, None, 4, None, None, None, None),  # log start unknown: no lag
    ]


def test_members_without_partitions_get_a_row_of_dashes() -> None:
    idle = MemberView("rlog-consumer-9f", "rlog-consumer", "/10.0.0.2")
    assert idle_member_rows("g", [MEMBER, idle]) == [
        ("g", None, None, None, None, None, "rlog-consumer-9f", "/10.0.0.2", "rlog-consumer")
    ]


def test_lag_is_unknown_without_a_log_end() -> None:
    rows = lag_rows("g", {("t", 0): 4}, {("t", 0): None}, [])
    assert (rows[0].current_offset, rows[0].log_end_offset, rows[0].lag) == (4, None, None)


def test_describe_table_prints_dashes(capsys: pytest.CaptureFixture[str]) -> None:
    rows = lag_rows("g", {("t", 0): 7}, {("t", 0): 10}, [])
    Terminal().table(DESCRIBE_HEADERS, [r.cells() for r in rows])
    header, line = capsys.readouterr().out.splitlines()
    assert header.split() == list(DESCRIBE_HEADERS)
    assert line.split() == ["g", "t", "0", "7", "10", "3", "-", "-", "-"]


def test_describe_document_and_notes() -> None:
    empty = GroupView("g", "Empty")
    assert group_note(empty) == "Consumer group 'g' has no active members."
    stable = GroupView("g", "Stable", (MEMBER,), "range", "127.0.0.1:9092 (1)")
    assert group_note(stable) == "Consumer group 'g' is Stable with 1 active member."
    rebalancing = GroupView("g", "PreparingRebalance", (MEMBER, MEMBER))
    assert group_note(rebalancing) == "Warning: Consumer group 'g' is rebalancing."
    rows = lag_rows("g", {("t", 1): 2}, {("t", 1): 3, ("u", 0): 0}, stable.members)
    document = describe_document(stable, rows)
    assert document["state"] == "Stable" and document["member_count"] == 1
    assert document["members"][0]["partitions"] == [
        {"topic": "t", "partition": 1},
        {"topic": "u", "partition": 0},
    ]
    assert document["partitions"][0] == {
        "topic": "t",
        "partition": 1,
        "current_offset": 2,
        "log_end_offset": 3,
        "lag": 1,
        "consumer_id": "rlog-consumer-1a2b",
        "host": "/127.0.0.1",
        "client_id": "rlog-consumer",
    }


def test_state_names_are_kafkas() -> None:
    assert state_name(ConsumerGroupState.STABLE) == "Stable"
    assert state_name(ConsumerGroupState.PREPARING_REBALANCING) == "PreparingRebalance"
    assert state_name(ConsumerGroupState.COMPLETING_REBALANCING) == "CompletingRebalance"
    assert state_name(ConsumerGroupState.EMPTY) == "Empty"
    assert state_name(ConsumerGroupState.DEAD) == "Dead"
    assert state_name("STABLE") == "Stable"
    assert state_name(None) == "Unknown"


def test_live_members_message_names_group_and_count() -> None:
    error = live_members_error("delete", "g", 2, "Stable")
    assert error.code == ExitCode.FAILURE
    assert "cannot delete consumer group 'g': it has 2 active members (state Stable)" in (
        error.message
    )
    assert "1 active member " in live_members_error("delete", "g", 1, "Stable").message


# -- consume --group ---------------------------------------------------------------------


def test_group_offsets_only_choose_the_reset_policy() -> None:
    assert group_offset_reset(parse_offset("start"), "start", None) == "earliest"
    assert group_offset_reset(parse_offset("beginning"), "beginning", None) == "earliest"
    assert group_offset_reset(parse_offset("end"), "end", None) == "latest"
    assert group_offset_reset(parse_offset("stored"), "stored", None) is None
    for text in ("5", "+2", "-3", "2:4", ":end", "@1700000000000", "start:end"):
        with pytest.raises(CliError, match="cannot be used with --group") as caught:
            group_offset_reset(parse_offset(text), text, None)
        assert caught.value.code == ExitCode.USAGE
    with pytest.raises(CliError, match="--partition cannot be used with --group"):
        group_offset_reset(parse_offset("end"), None, [0])


def test_next_offsets_commit_last_plus_one_per_partition() -> None:
    messages = [
        Message(topic="t", partition=1, offset=4, leader_epoch=2),
        Message(topic="t", partition=0, offset=9),
        Message(topic="t", partition=1, offset=5, leader_epoch=3),
    ]
    offsets = next_offsets(messages)
    assert [(tp.topic, tp.partition, tp.offset, tp.leader_epoch) for tp in offsets] == [
        ("t", 0, 10, None),
        ("t", 1, 6, 3),
    ]
    assert next_offsets([]) == []


def test_group_member_exit_at_end_tracks_the_assignment() -> None:
    member = GroupMember("g", auto_commit=True, exit_at_end=True)
    assert not member.finished()  # no assignment yet
    member.on_assign(None, [TopicPartition("t", 0), TopicPartition("t", 1)])  # type: ignore[arg-type]
    member.at_end.add(0)
    assert not member.finished()
    member.at_end.add(1)
    assert member.finished()
    member.on_revoke(None, [TopicPartition("t", 1)])  # type: ignore[arg-type]
    assert not member.finished()  # a rebalance is under way
    member.on_assign(None, [TopicPartition("t", 2)])  # type: ignore[arg-type]
    assert member.assigned == {0, 2} and not member.finished()
    assert not GroupMember("g", True, exit_at_end=False).finished()


def test_ctrl_c_waits_until_printed_records_are_committed() -> None:
    """A Ctrl-C between writing records and storing their offsets is held until both are
    done (else the group prints them again); a second one interrupts at once."""
    # Python's own handler, as `rlog consume` has it: earlier tests in this process (PySpark's
    # SparkContext) may have installed theirs, which deferred_interrupt leaves alone.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _check_deferred_interrupt()
    finally:
        signal.signal(signal.SIGINT, previous)


def _check_deferred_interrupt() -> None:
    done: list[str] = []
    with pytest.raises(KeyboardInterrupt), deferred_interrupt():
        os.kill(os.getpid(), signal.SIGINT)
        done.append("written")
        done.append("committed")
    assert done == ["written", "committed"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    with pytest.raises(KeyboardInterrupt), deferred_interrupt():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGINT)
        done.append("never")
    assert "never" not in done


# -- flags checked before any connection --------------------------------------------------

runner = CliRunner()


def _invoke(tmp_path: Path, *args: str) -> CliError:
    """Run ``rlog ARGS`` in-process with no cluster anywhere: the command must refuse the flags
    with a usage error before it tries to reach one."""
    result = runner.invoke(
        cli_app.app,
        ["--data-dir", str(tmp_path / "none"), *args],
        env={"RLOG_BOOTSTRAP": "", "RLOG_BROKERS": ""},
    )
    assert isinstance(result.exception, CliError), (result.exception, result.output)
    return result.exception


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--to-earliest", "--to-latest"], "got --to-earliest, --to-latest"),
        (["--shift-by", "-2", "--to-offset", "3"], "got --to-offset, --shift-by"),
        ([], "got none"),
        (["--to-datetime", "soon"], "bad datetime"),
        (["--by-duration", "1h"], "bad duration"),
        (["--to-earliest", "--dry-run", "--execute"], "--dry-run or --execute"),
    ],
)
def test_reset_offsets_usage_errors(tmp_path: Path, args: list[str], words: str) -> None:
    error = _invoke(tmp_path, "group", "reset-offsets", "g", "--topic", "t", *args)
    assert error.code == ExitCode.USAGE
    assert words in error.message


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["-g", "g", "-p", "0"], "--partition cannot be used with --group"),
        (["-g", "g", "-o", "5"], "--offset 5 cannot be used with --group"),
        (["-g", "g", "-o", "-3"], "--offset -3 cannot be used with --group"),
        (["-g", "", "-e"], "non-empty group id"),
        (["-o", "stored"], "--offset stored needs --group"),
        (["--no-auto-commit"], "--no-auto-commit needs --group"),
        (["-g", "g", "--from-beginning", "-o", "end"], "--from-beginning or --offset"),
    ],
)
def test_consume_group_usage_errors(tmp_path: Path, args: list[str], words: str) -> None:
    error = _invoke(tmp_path, "consume", "t", *args)
    assert error.code == ExitCode.USAGE
    assert words in error.message


def test_describe_members_and_state_exclude_each_other(tmp_path: Path) -> None:
    error = _invoke(tmp_path, "group", "describe", "g", "--members", "--state")
    assert error.code == ExitCode.USAGE


def test_usage_error_is_one_line_through_main(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLOG_DATA_DIR", str(tmp_path / "none"))
    monkeypatch.delenv("RLOG_BOOTSTRAP", raising=False)
    monkeypatch.delenv("RLOG_BROKERS", raising=False)
    code = cli_app.main(
        ["group", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--shift-by", "1"]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert code == ExitCode.USAGE
    assert len(err) == 1 and err[0].startswith("rlog: error: choose exactly one of")
    # with a valid strategy, the next failure is the missing cluster: the flags were fine
    code = cli_app.main(["group", "reset-offsets", "g", "--topic", "t", "--to-earliest"])
    assert code == ExitCode.NOT_RUNNING
    assert "not running" in capsys.readouterr().err
