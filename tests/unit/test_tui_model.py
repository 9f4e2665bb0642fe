"""The TUI's model: pure functions from snapshots to rows, bars, marks and rates, and the
groups source's reading of AdminClient answers, all without Textual or a cluster."""

from __future__ import annotations

from concurrent.futures import Future
from typing import Any

import pytest
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import (
    ConsumerGroupDescription,
    ConsumerGroupListing,
    ListConsumerGroupsResult,
    MemberAssignment,
    MemberDescription,
)
from rich.text import Text

from rlog.cli import replicas, txn
from rlog.cli.discovery import Settings
from rlog.cli.terminal import CliError, ColorMode, Terminal
from rlog.cli.tui import model, transactions
from rlog.cli.tui.groups import NO_GROUPS, GroupsSource
from rlog.cli.tui.snapshot import (
    BrokerTraffic,
    CommittedOffset,
    Event,
    GroupInfo,
    GroupMember,
    PartitionInfo,
    ProcessInfo,
    Snapshot,
    TransactionInfo,
)
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode


def partition(
    topic: str = "orders",
    number: int = 0,
    *,
    leader: int = 1,
    replicas: tuple[int, ...] = (1, 2, 3),
    isr: tuple[int, ...] = (1, 2, 3),
    hw: int | None = 100,
    leos: dict[int, int | None] | None = None,
    lso: int | None = None,
) -> PartitionInfo:
    ends = leos if leos is not None else dict.fromkeys(replicas, 100)
    return PartitionInfo(topic, number, leader, 4, replicas, isr, hw, tuple(ends.items()), lso)


def brokers(*states: str) -> tuple[ProcessInfo, ...]:
    controller = ProcessInfo("controller", "controller", None, 10, "running")
    found = [
        ProcessInfo(f"broker-{i}", "broker", i, 10 + i, state, 5.0, 2**20 * 40, 90.0)
        for i, state in enumerate(states, start=1)
    ]
    return (controller, *found)


def plain(row: model.Row) -> list[str]:
    return [cell.plain for cell in row[1]]


# -- brokers ----------------------------------------------------------------------------------


def test_broker_rows_show_process_columns_and_leader_counts() -> None:
    snapshot = Snapshot(
        1.0,
        processes=brokers("running", "paused"),
        partitions=(partition(number=0, leader=1), partition(number=1, leader=1)),
    )
    rows = model.broker_rows(snapshot, {1: 12.5, 2: 0.0})
    assert [key for key, _ in rows] == ["controller", "broker-1", "broker-2"]
    assert plain(rows[0])[:4] == ["controller", "controller", "running", "10"]
    assert plain(rows[0])[-2:] == ["-", "-"]  # the controller leads no partitions
    assert plain(rows[1]) == [
        "broker-1",
        "broker",
        "running",
        "11",
        "5",
        "40M",
        "90s",
        "0",
        "2",
        "12",
    ]
    assert plain(rows[2])[2] == "paused" and rows[2][1][2].style == "yellow"
    assert plain(rows[2])[-2:] == ["0", "0"]


def test_process_info_reads_rlogd_status_entries_including_unknowns() -> None:
    entry = {"name": "broker-2", "id": 2, "pid": None, "state": "restarting", "restarts": 3}
    info = ProcessInfo.from_status(entry, "broker")
    assert info == ProcessInfo("broker-2", "broker", 2, None, "restarting", restarts=3)
    row = model.broker_rows(Snapshot(0.0, processes=(info,)), {})[0]
    assert plain(row)[3:7] == ["-", "-", "-", "-"]


# -- partitions -------------------------------------------------------------------------------


def test_out_of_sync_replicas_are_marked() -> None:
    p = partition(isr=(1, 3))
    assert model.out_of_sync(p) == (2,)
    cell = model.replicas_cell(p)
    assert cell.plain == "1,2!,3"
    marked = [span for span in cell.spans if span.style == model.OUT_OF_SYNC_STYLE]
    assert [cell.plain[s.start : s.end] for s in marked] == ["2!"]
    assert model.replicas_cell(partition()).plain == "1,2,3"


@pytest.mark.parametrize(
    ("leo", "leader_end", "bar"),
    [
        (100, 100, "████"),
        (0, 0, "████"),  # an empty log: nothing to lag behind
        (50, 100, "██··"),
        (0, 100, "····"),
        (99, 100, "███▉"),  # one record behind never looks caught up
        (None, 100, "????"),
        (100, None, "????"),
    ],
)
def test_lag_bar(leo: int | None, leader_end: int | None, bar: str) -> None:
    assert model.lag_bar(leo, leader_end) == bar
    assert len(model.lag_bar(leo, leader_end, width=10)) == 10


def test_partition_rows_have_leo_and_lag_per_broker() -> None:
    lagging = partition(number=0, isr=(1, 3), leos={1: 150, 2: 80, 3: 150}, hw=120)
    offline = partition(number=1, leader=-1, isr=(), hw=None, leos={1: None, 2: None, 3: None})
    two = partition("a", 0, leader=2, replicas=(2, 4), isr=(2, 4), leos={2: 7, 4: 7}, hw=7)
    internal = partition("__consumer_offsets", 0)
    columns = model.partition_columns([lagging, offline, two, internal])
    assert columns == (*model.PARTITION_COLUMNS, "1 LEO", "2 LEO", "3 LEO", "4 LEO")
    rows = model.partition_rows([internal, offline, lagging, two])
    assert [key for key, _ in rows] == ["a-0", "orders-0", "orders-1", "__consumer_offsets-0"]
    a, first, second, _ = (plain(r) for r in rows)
    assert a == ["a", "0", "2", "4", "2,4", "2,4", "7", "", "7 ████", "", "7 ████"]
    assert first[:7] == ["orders", "0", "1", "4", "1,2!,3", "1,3", "120"]
    assert first[7:] == ["150 ████", "80 ██▏· -70", "150 ████", ""]
    assert second[2] == "none" and second[6] == "-"
    assert second[7:10] == ["- ????"] * 3
    assert all(len(plain(r)) == len(columns) for r in rows)


def test_partition_rows_keep_the_widest_lag_bars_that_fit() -> None:
    lagging = partition(number=0, isr=(1, 3), leos={1: 150, 2: 80, 3: 150}, hw=120)
    parts = [lagging]
    columns = model.partition_columns(parts)
    wide = model.table_width(columns, model.partition_rows(parts))
    assert model.fitting_partition_rows(parts, width=None)[0] == model.BAR_WIDTH
    assert model.fitting_partition_rows(parts, width=wide)[0] == model.BAR_WIDTH
    bar_width, rows = model.fitting_partition_rows(parts, width=wide - 1)
    assert bar_width == 2 and plain(rows[0])[7:] == ["150 ██", "80 █▏ -70", "150 ██"]
    bar_width, rows = model.fitting_partition_rows(parts, width=40)  # too narrow for any
    assert bar_width == 0 and plain(rows[0])[7:] == ["150", "80 -70", "150"]
    # The width a DataTable needs: each column's widest cell or header, one space each side.
    assert model.table_width(("A", "BB"), [("k", (Text("xyz"), Text("")))]) == 9
    assert model.table_width(("A",), []) == 3


def test_lag_is_behind_the_leaders_leo() -> None:
    p = partition(leader=3, leos={1: 90, 2: None, 3: 95})
    assert model.leader_leo(p) == 95
    assert [model.lag(p, r) for r in (1, 2, 3)] == [5, None, 0]
    assert model.lag(partition(leader=-1), 1) is None


def test_leader_counts() -> None:
    parts = [partition(leader=1), partition(number=1, leader=1), partition(number=2, leader=-1)]
    assert model.leader_counts(parts) == {1: 2}


def test_the_lso_column_shows_only_while_a_transaction_holds_an_lso_back() -> None:
    settled = partition(number=0, hw=100, lso=100)
    unknown = partition(number=1, hw=100, lso=None)
    assert not model.held_back(settled) and not model.held_back(unknown)
    assert not model.held_back(partition(hw=None, lso=5))
    assert model.partition_columns([settled, unknown])[:7] == model.PARTITION_COLUMNS
    assert len(plain(model.partition_rows([settled])[0])) == 7 + 3

    held = partition(number=2, hw=100, lso=40)
    assert model.held_back(held)
    columns = model.partition_columns([settled, held])
    assert columns[5:8] == ("ISR", "LSO", "HW")
    rows = model.partition_rows([settled, unknown, held])
    assert [plain(r)[6:8] for r in rows] == [["", "100"], ["", "100"], ["40", "100"]]
    assert rows[2][1][6].style == model.HELD_BACK_STYLE
    assert all(len(plain(r)) == len(columns) for r in rows)


# -- consumer groups --------------------------------------------------------------------------


def test_group_rows_lag_from_the_partitions_high_watermark() -> None:
    member = GroupMember("m-1", "billing-app", "/127.0.0.1", (("orders", 0),))
    groups = [
        GroupInfo(
            "billing",
            "stable",
            (member,),
            (CommittedOffset("orders", 1, None), CommittedOffset("orders", 0, 100)),
        ),
        GroupInfo("audit", "empty"),
    ]
    parts = [partition(number=0, hw=120), partition(number=1, hw=None)]
    rows = model.group_rows(groups, parts)
    assert [key for key, _ in rows] == ["audit", "billing/orders-0", "billing/orders-1"]
    assert plain(rows[0]) == ["audit", "empty", "0", "-", "-", "-", "-", "-", "-"]
    assert plain(rows[1]) == [
        "billing",
        "stable",
        "1",
        "orders",
        "0",
        "100",
        "120",
        "20",
        "billing-app",
    ]
    assert plain(rows[2])[5:] == ["-", "-", "-", "-"]


def test_group_rows_show_owned_partitions_with_no_commit_yet() -> None:
    member = GroupMember("m-1", "billing-app", "/127.0.0.1", (("orders", 2), ("orders", 0)))
    groups = [GroupInfo("billing", "stable", (member,), (CommittedOffset("orders", 0, 7),))]
    parts = [partition(number=0, hw=10), partition(number=2, hw=30)]
    rows = model.group_rows(groups, parts)
    assert [key for key, _ in rows] == ["billing/orders-0", "billing/orders-2"]
    assert plain(rows[0])[3:] == ["orders", "0", "7", "10", "3", "billing-app"]
    assert plain(rows[1])[3:] == ["orders", "2", "-", "30", "-", "billing-app"]


def test_groups_message_says_no_consumer_groups_rather_than_an_error() -> None:
    assert model.groups_message(Snapshot(0.0)) == "no consumer groups"
    note = "no consumer groups (the brokers do not serve the group APIs)"
    assert model.groups_message(Snapshot(0.0, groups_note=note)) == note
    assert model.groups_message(Snapshot(0.0, groups=(GroupInfo("g", "stable"),))).startswith("1 ")
    assert model.group_lag(5, 3) == 0 and model.group_lag(None, 3) is None


# -- the groups source, on AdminClient answers --------------------------------------------------


def done(value: Any = None, error: BaseException | None = None) -> Future[Any]:
    future: Future[Any] = Future()
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(value)
    return future


class FakeAdmin:
    """Answers as confluent-kafka's AdminClient does, from plain data."""

    def __init__(self, listed: Future[Any], described: dict[str, Any], offsets: dict) -> None:
        self.listed = listed
        self.described = described
        self.offsets = offsets

    def list_consumer_groups(self, **_: Any) -> Future[Any]:
        return self.listed

    def describe_consumer_groups(self, ids: list[str], **_: Any) -> dict[str, Future[Any]]:
        return {gid: done(self.described[gid]) for gid in ids}

    def list_consumer_group_offsets(self, request: list, **_: Any) -> dict[str, Future[Any]]:
        (wanted,) = request  # one group per request, as the real client insists
        return {wanted.group_id: done(self.offsets[wanted.group_id])}


def source_with(admin: FakeAdmin) -> GroupsSource:
    settings = Settings(terminal=Terminal(color=ColorMode.NEVER))
    source = GroupsSource(settings, timeout_s=1.0)
    source._client = admin  # type: ignore[assignment]
    source._bootstrap = "b:1"
    return source


def test_groups_source_reads_members_assignment_and_offsets() -> None:
    assignment = MemberAssignment([TopicPartition("orders", 0), TopicPartition("orders", 1)])
    member = MemberDescription("m-1", "app", "/127.0.0.1", assignment)
    description = ConsumerGroupDescription(
        "billing", False, [member], "range", ConsumerGroupState.STABLE, None
    )
    committed = ConsumerGroupTopicPartitions(
        "billing", [TopicPartition("orders", 0, 42), TopicPartition("orders", 1, -1001)]
    )
    listed = done(ListConsumerGroupsResult([ConsumerGroupListing("billing", False)], []))
    groups, note = source_with(
        FakeAdmin(listed, {"billing": description}, {"billing": committed})
    ).fetch("b:1")
    assert note is None
    assert groups == (
        GroupInfo(
            "billing",
            "stable",
            (GroupMember("m-1", "app", "/127.0.0.1", (("orders", 0), ("orders", 1))),),
            (CommittedOffset("orders", 0, 42), CommittedOffset("orders", 1, None)),
        ),
    )


@pytest.mark.parametrize(
    "listed",
    [
        done(ListConsumerGroupsResult([], [])),
        done(error=KafkaException(KafkaError(KafkaError._UNSUPPORTED_FEATURE))),
        done(
            ListConsumerGroupsResult(
                [], [KafkaException(KafkaError(KafkaError.UNSUPPORTED_VERSION))]
            )
        ),
    ],
    ids=["empty", "unsupported", "unsupported-per-broker"],
)
def test_no_groups_or_no_group_apis_is_no_consumer_groups(listed: Future[Any]) -> None:
    groups, note = source_with(FakeAdmin(listed, {}, {})).fetch("b:1")
    assert groups == ()
    assert note is not None and note.startswith(NO_GROUPS)


def test_other_group_failures_are_errors() -> None:
    listed = done(error=KafkaException(KafkaError(KafkaError._TRANSPORT)))
    with pytest.raises(KafkaException):
        source_with(FakeAdmin(listed, {}, {})).fetch("b:1")


def test_a_refresh_that_timed_out_gives_the_next_one_a_new_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """librdkafka's admin client can stay stuck on a dead coordinator for minutes: the source
    must not keep asking the same client."""
    stuck = FakeAdmin(done(error=KafkaException(KafkaError(KafkaError._TIMED_OUT))), {}, {})
    source = source_with(stuck)
    with pytest.raises(KafkaException):
        source.fetch("b:1")
    description = ConsumerGroupDescription("billing", False, [], "", ConsumerGroupState.EMPTY, None)
    fresh = FakeAdmin(
        done(ListConsumerGroupsResult([ConsumerGroupListing("billing", False)], [])),
        {"billing": description},
        {"billing": ConsumerGroupTopicPartitions("billing", [])},
    )
    made: list[dict[str, Any]] = []
    monkeypatch.setattr(
        "rlog.cli.tui.groups.AdminClient", lambda config: made.append(config) or fresh
    )
    groups, _note = source.fetch("b:1")
    assert [group.group_id for group in groups] == ["billing"]
    assert len(made) == 1 and made[0]["bootstrap.servers"] == "b:1"
    source.fetch("b:1")
    assert len(made) == 1  # a refresh that worked keeps its client


# -- transactions -----------------------------------------------------------------------------

NOW_MS = 1_700_000_100_000


def test_transaction_age_counts_only_open_transactions() -> None:
    ongoing = TransactionInfo("a", 1, 7, "Ongoing", 0, 60_000, NOW_MS - 12_500)
    assert model.transaction_age_s(ongoing, NOW_MS) == 12.5
    assert model.transaction_age_s(ongoing, None) is None
    done_ = TransactionInfo("b", 1, 8, "CompleteCommit", 0, 60_000, NOW_MS - 12_500)
    assert model.transaction_age_s(done_, NOW_MS) is None  # its start is the last one's
    assert model.transaction_age_s(TransactionInfo("c", 1, 9, "Ongoing"), NOW_MS) is None
    skewed = TransactionInfo("d", 1, 9, "PrepareCommit", 0, 60_000, NOW_MS + 50)
    assert model.transaction_age_s(skewed, NOW_MS) == 0


def test_partitions_text_is_cut_with_a_count_of_the_rest() -> None:
    assert model.partitions_text(()) == "-"
    assert model.partitions_text((("orders", 0), ("orders", 1))) == "orders-0,orders-1"
    many = tuple(("events", i) for i in range(8))
    assert model.partitions_text(many, width=24) == "events-0 +7 more"
    assert model.partitions_text(many, width=40) == "events-0,events-1,events-2 +5 more"
    assert model.partitions_text(many, width=200).count(",") == 7
    assert model.partitions_text((("a-very-long-topic-name", 0),), width=5) == (
        "a-very-long-topic-name-0"  # the first is always shown whole
    )


def test_transaction_rows_highlight_ongoing_and_overdue_ones() -> None:
    found = [
        TransactionInfo("zeta", 2, 11, "CompleteCommit", 3, 60_000, NOW_MS - 9_000),
        TransactionInfo(
            "alpha", 1, 10, "Ongoing", 0, 60_000, NOW_MS - 12_000, (("orders", 0), ("orders", 1))
        ),
        TransactionInfo("late", 1, 12, "Ongoing", 4, 10_000, NOW_MS - 95_000, (("orders", 2),)),
        TransactionInfo("listed", 3, 13, "Empty"),  # not described
    ]
    rows = model.transaction_rows(found, NOW_MS)
    assert [key for key, _ in rows] == ["alpha", "late", "listed", "zeta"]
    assert [plain(r) for r in rows] == [
        ["alpha", "Ongoing", "1", "10", "0", "12s", "orders-0,orders-1"],
        ["late", "Ongoing", "1", "12", "4", "95s", "orders-2"],
        ["listed", "Empty", "3", "13", "-", "-", "-"],
        ["zeta", "CompleteCommit", "2", "11", "3", "-", "-"],
    ]
    alpha, late, listed, zeta = (r[1] for r in rows)
    assert alpha[0].style == alpha[1].style == model.TXN_STATE_STYLES["Ongoing"]
    assert alpha[5].style == ""  # within its timeout
    assert late[5].style == "bold red"  # past transaction.timeout.ms: about to be aborted
    assert zeta[0].style == "" and zeta[1].style == "green"
    assert listed[1].style == "dim"
    assert all(len(cells) == len(model.TXN_COLUMNS) for _, cells in rows)


def test_transactions_message_counts_open_ones_and_says_what_is_missing() -> None:
    assert model.transactions_message(Snapshot(0.0)).plain == "no transactions"
    snapshot = Snapshot(
        0.0,
        transactions=(
            TransactionInfo("a", 1, 1, "Ongoing"),
            TransactionInfo("b", 1, 2, "PrepareAbort"),
            TransactionInfo("c", 1, 3, "CompleteAbort"),
        ),
        transaction_warnings=("broker 2 did not answer ListTransactions",),
    )
    text = model.transactions_message(snapshot).plain
    assert text.startswith("3 transactional id(s), 2 open; ")
    assert text.endswith("; broker 2 did not answer ListTransactions (the list may be incomplete)")


# -- the transactions source, on wire answers ---------------------------------------------------


def listed(*entries: tuple[str, int, str]) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.NONE,
        "unknown_state_filters": [],
        "transaction_states": [
            {"transactional_id": t, "producer_id": pid, "transaction_state": state}
            for t, pid, state in entries
        ],
    }


def described(transactional_id: str, state: str, start_ms: int, *parts: int) -> dict[str, Any]:
    return {
        "error_code": ErrorCode.NONE,
        "transactional_id": transactional_id,
        "transaction_state": state,
        "transaction_timeout_ms": 60_000,
        "transaction_start_time_ms": start_ms,
        "producer_id": 70,
        "producer_epoch": 3,
        "topics": [{"topic": "orders", "partitions": list(parts)}] if parts else [],
    }


class FakeWire:
    """Answers as rlog's brokers do, by broker id; a broker without answers is down."""

    def __init__(self, answers: dict[tuple[int, ApiKey], dict[str, Any]], brokers: int) -> None:
        self.answers = answers
        self.node_ids = range(1, brokers + 1)
        self.brokers: dict[int, tuple[str, int]] = {}
        self.asked: list[tuple[int, ApiKey, dict[str, Any]]] = []
        self.closed = False

    def request_any(self, api_key: ApiKey, version: int, body: dict[str, Any]) -> dict[str, Any]:
        assert api_key == ApiKey.METADATA
        return {"brokers": [{"node_id": n, "host": "h", "port": 9000 + n} for n in self.node_ids]}

    def request_at(
        self, broker_id: int, api_key: ApiKey, version: int, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        self.asked.append((broker_id, api_key, body))
        return self.answers.get((broker_id, api_key))

    def close(self) -> None:
        self.closed = True


def fetch_with(monkeypatch: pytest.MonkeyPatch, wire: FakeWire) -> transactions.Transactions:
    monkeypatch.setattr(replicas, "WireCluster", lambda bootstrap, timeout_s, tls=None: wire)
    found = transactions.fetch_transactions("h:9001", timeout_s=0.5)
    assert wire.closed
    return found


def test_transactions_source_describes_each_id_at_the_coordinator_that_listed_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    start = NOW_MS - 5_000
    wire = FakeWire(
        {
            (1, ApiKey.LIST_TRANSACTIONS): listed(("pay", 70, "Ongoing")),
            (2, ApiKey.LIST_TRANSACTIONS): listed(("audit", 71, "CompleteCommit")),
            (1, ApiKey.DESCRIBE_TRANSACTIONS): {
                "transaction_states": [described("pay", "Ongoing", start, 1, 0)]
            },
            (2, ApiKey.DESCRIBE_TRANSACTIONS): {
                "transaction_states": [
                    {**described("audit", "Empty", -1), "error_code": ErrorCode.NOT_COORDINATOR}
                ]
            },
        },
        brokers=2,
    )
    found = fetch_with(monkeypatch, wire)
    assert found.warnings == ()
    assert found.found == (
        TransactionInfo("audit", 2, 71, "CompleteCommit"),  # moved: shown as listed
        TransactionInfo("pay", 1, 70, "Ongoing", 3, 60_000, start, (("orders", 0), ("orders", 1))),
    )
    describes = [(b, body) for b, key, body in wire.asked if key == ApiKey.DESCRIBE_TRANSACTIONS]
    assert describes == [(1, {"transactional_ids": ["pay"]}), (2, {"transactional_ids": ["audit"]})]
    assert found.at_ms is not None and found.at_ms > 1_600_000_000_000


def test_transactions_source_a_broker_down_is_a_warning_none_answering_an_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wire = FakeWire({(1, ApiKey.LIST_TRANSACTIONS): listed(("pay", 70, "Ongoing"))}, brokers=2)
    found = fetch_with(monkeypatch, wire)
    assert found.found == (TransactionInfo("pay", 1, 70, "Ongoing"),)
    assert found.warnings == (
        "broker 2 did not answer ListTransactions",
        "broker 1 did not answer DescribeTransactions",
    )
    with pytest.raises(CliError, match="no broker answered"):
        fetch_with(monkeypatch, FakeWire({}, brokers=2))


def test_combine_prefers_the_newer_description() -> None:
    listing = txn.Listing("pay", 1, 70, "Ongoing")
    description = txn.Description("pay", 1, 70, 4, "PrepareCommit", 60_000, 5, (("o", 0),))
    assert transactions.combine([listing], {"pay": description}) == (
        TransactionInfo("pay", 1, 70, "PrepareCommit", 4, 60_000, 5, (("o", 0),)),
    )
    assert transactions.combine([listing], {}) == (TransactionInfo("pay", 1, 70, "Ongoing"),)


# -- rates ------------------------------------------------------------------------------------


def test_rates_come_from_each_brokers_counters() -> None:
    procs = brokers("running", "running", "running")
    before = Snapshot(
        10.0,
        processes=procs,
        traffic=(
            BrokerTraffic(1, pid=100, ts=50.0, records_in=1_000, records_out=400),
            BrokerTraffic(2, pid=200, ts=50.0, records_in=10, records_out=10),
            BrokerTraffic(3, pid=300, ts=50.0, records_in=5, records_out=5),
        ),
    )
    after = Snapshot(
        11.0,
        processes=procs,
        traffic=(
            BrokerTraffic(1, pid=100, ts=52.0, records_in=1_600, records_out=1_400),
            BrokerTraffic(2, pid=201, ts=52.0, records_in=3, records_out=0),  # restarted
            BrokerTraffic(3, pid=300, ts=50.0, records_in=5, records_out=5),  # no new write
        ),
    )
    rates = model.traffic_rates(before, after)
    assert rates.records_in == {1: 300.0, 2: 0.0, 3: 0.0}
    assert rates.records_out == {1: 500.0, 2: 0.0, 3: 0.0}
    assert model.traffic_rates(None, after).records_in == {1: 0.0, 2: 0.0, 3: 0.0}


def test_series_grow_and_are_bounded() -> None:
    history: dict[int, tuple[float, ...]] = {}
    for value in range(5):
        history = model.push_series(history, {1: float(value)}, keep=3)
    assert history == {1: (2.0, 3.0, 4.0)}
    history = model.push_series(history, {2: 7.0}, keep=3)
    assert history == {1: (3.0, 4.0, 0.0), 2: (7.0,)}
    assert model.padded((7.0,), keep=3) == (0.0, 0.0, 7.0)
    views = model.rate_views(history, {1: (5.0,)})
    assert [v.caption for v in views[:2]] == [
        "broker-1 in 0/s (peak 4.0)",
        "broker-1 out 5.0/s (peak 5.0)",
    ]
    assert [(v.broker, v.direction) for v in views[2:]] == [(2, "in"), (2, "out")]
    assert all(len(v.series) == model.SERIES_LENGTH for v in views)


# -- events, status, the form -----------------------------------------------------------------


def test_event_line_and_status_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model, "clock", lambda ts: "12:00:00")
    line = model.event_line(Event(1.0, "rlogd", "process_exited", "broker-2 exited"))
    assert line.plain == "12:00:00 rlogd process_exited broker-2 exited"
    assert model.status_line(None, 1.0).plain == "connecting..."
    down = Snapshot(0.0, errors=("rlog cluster is not running in /d", "cannot reach any broker"))
    assert model.status_line(down, 1.0).plain == "rlog cluster is not running in /d (+1 more)"
    snapshot = Snapshot(
        0.0,
        processes=brokers("running", "stopped"),
        partitions=(partition(isr=(1,)), partition(number=1, leader=-1)),
    )
    assert model.status_line(snapshot, 0.5).plain == (
        "1/2 brokers running, 2 partitions, 1 under-replicated, 1 offline; refresh 0.5s"
    )


def test_parse_topic_form() -> None:
    assert model.parse_topic_form(" orders ", "3", " 2") == model.TopicRequest("orders", 3, 2)
    for name, parts, factor, complaint in [
        ("", "1", "1", "topic name"),
        ("a b", "1", "1", "topic name"),
        ("..", "1", "1", "topic name"),
        ("x" * 250, "1", "1", "topic name"),
        ("t", "zero", "1", "partitions"),
        ("t", "1", "0", "replication factor"),
    ]:
        with pytest.raises(ValueError, match=complaint):
            model.parse_topic_form(name, parts, factor)
