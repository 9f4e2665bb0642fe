"""``rlog group describe`` and ``rlog group list --type`` of consumer-protocol groups (KIP-848)
without a broker: a ConsumerGroupDescribe answer's body read and rendered (tables, stderr notes,
JSON), the classic fallback on GROUP_ID_NOT_FOUND through a fake cluster, and --type's checks."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import ConsumerGroupType
from typer.testing import CliRunner

from rlog.cli import app as cli_app
from rlog.cli import group as group_cli
from rlog.cli.group import (
    DESCRIBE_HEADERS,
    STATE_HEADERS,
    GroupView,
    MemberView,
    consumer_group_view,
    describe_consumer_group,
    describe_document,
    group_note,
    idle_member_rows,
    lag_rows,
    state_row,
)
from rlog.cli.group_describe import (
    CONSUMER_MEMBERS_HEADERS,
    CONSUMER_STATE_HEADERS,
    consumer_describe_document,
    consumer_group_of,
    consumer_members_rows,
    consumer_state_row,
    group_type_name,
    parse_group_types,
    partitions_text,
    pending_text,
    protocol_note,
    reconciling_notes,
)
from rlog.cli.terminal import CliError, ExitCode, Terminal
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode

ORDERS_ID = "c15b1d0a-143b-3308-50de-64c874772c8d"
LOGS_ID = "0a1b2c3d-0000-4000-8000-000000000001"


def _assignment(*topics: tuple[str, str, list[int]]) -> dict[str, Any]:
    return {
        "topic_partitions": [
            {"topic_id": topic_id, "topic_name": name, "partitions": partitions}
            for topic_id, name, partitions in topics
        ]
    }


# A group mid-rebalance: "b" joined, the assignor moved orders-2 and orders-3 to it (assignment
# epoch 5), "a" still owns them and "b" owns nothing yet. The coordinator lists "b" first; the
# rendering sorts by client id.
ANSWER: dict[str, Any] = {
    "error_code": 0,
    "error_message": None,
    "group_id": "g",
    "group_state": "Reconciling",
    "group_epoch": 5,
    "assignment_epoch": 5,
    "assignor_name": "uniform",
    "members": [
        {
            "member_id": "member-b",
            "instance_id": None,
            "rack_id": None,
            "member_epoch": 5,
            "client_id": "client-b",
            "client_host": "/127.0.0.1",
            "subscribed_topic_names": ["orders"],
            "subscribed_topic_regex": None,
            "assignment": _assignment(),
            "target_assignment": _assignment((ORDERS_ID, "orders", [3, 2])),
        },
        {
            "member_id": "member-a",
            "instance_id": "static-a",
            "rack_id": "rack-1",
            "member_epoch": 5,
            "client_id": "client-a",
            "client_host": "/10.0.0.7",
            "subscribed_topic_names": ["orders", "logs"],
            "subscribed_topic_regex": None,
            "assignment": _assignment((ORDERS_ID, "orders", [0, 1, 2, 3]), (LOGS_ID, "logs", [0])),
            "target_assignment": _assignment((ORDERS_ID, "orders", [0, 1]), (LOGS_ID, "logs", [0])),
        },
    ],
    "authorized_operations": -2147483648,
}
COORDINATOR = "127.0.0.1:9093 (2)"


def _group() -> Any:
    return consumer_group_of(copy.deepcopy(ANSWER), COORDINATOR)


def _table(capsys: pytest.CaptureFixture[str], headers: Any, rows: Any) -> list[list[str]]:
    Terminal().table(headers, rows)
    return [line.split() for line in capsys.readouterr().out.splitlines()]


def test_the_answer_reads_as_members_with_current_and_target_assignments() -> None:
    group = _group()
    assert (group.group, group.state, group.group_epoch, group.assignment_epoch) == (
        "g",
        "Reconciling",
        5,
        5,
    )
    assert group.assignor == "uniform" and group.coordinator == COORDINATOR
    a, b = group.members
    assert a.member_id == "member-a" and b.member_id == "member-b"
    assert a.assignment == (("logs", 0), ("orders", 0), ("orders", 1), ("orders", 2), ("orders", 3))
    assert a.target_assignment == (("logs", 0), ("orders", 0), ("orders", 1))
    assert a.to_revoke == (("orders", 2), ("orders", 3)) and a.to_assign == ()
    assert b.to_assign == (("orders", 2), ("orders", 3)) and b.to_revoke == ()
    assert a.reconciling and b.reconciling
    assert (a.instance_id, a.rack_id, a.subscribed_topics) == (
        "static-a",
        "rack-1",
        ("logs", "orders"),
    )


def test_a_member_that_owns_its_target_is_not_reconciling() -> None:
    answer = copy.deepcopy(ANSWER)
    member = answer["members"][0]
    member["assignment"] = _assignment((ORDERS_ID, "orders", [2, 3]))
    group = consumer_group_of(answer)
    b = group.members[1]
    assert not b.reconciling and b.to_assign == () and b.to_revoke == ()
    assert [m.member_id for m in group.reconciling_members] == ["member-a"]


def test_a_member_behind_the_assignment_epoch_is_reconciling(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """As Kafka, the coordinator leaves out of a member's assignment the partitions it was asked
    to revoke and still holds: its assignment reads as its target, but its epoch is behind."""
    answer = copy.deepcopy(ANSWER)
    a = answer["members"][1]
    a["member_epoch"] = 4
    a["assignment"] = copy.deepcopy(a["target_assignment"])
    group = consumer_group_of(answer)
    member = group.members[0]
    assert member.behind and member.reconciling
    assert member.to_assign == () and member.to_revoke == ()
    assert member.as_json()["reconciling"] is True
    rows = _table(capsys, CONSUMER_MEMBERS_HEADERS, consumer_members_rows(group))
    assert rows[1][4:] == ["3", "4", "logs,orders", "logs:0;orders:0,1", "logs:0;orders:0,1",
                           "behind-epoch-5"]  # fmt: skip
    assert reconciling_notes(group)[0] == (
        "Member member-a (client client-a, epoch 4) is reconciling: to reach assignment epoch 5 "
        "(partitions it has yet to release are not reported)."
    )
    # No epoch (-1) is not "behind"; at the assignment epoch the member has caught up.
    a["member_epoch"] = -1
    assert not consumer_group_of(answer).members[0].reconciling
    a["member_epoch"] = 5
    assert not consumer_group_of(answer).members[0].reconciling


def test_partition_cells_use_rlogs_topic_syntax() -> None:
    assert partitions_text([("orders", 3), ("logs", 0), ("orders", 1)]) == "logs:0;orders:1,3"
    assert partitions_text([]) is None
    assert pending_text([("o", 3)], [("o", 1), ("o", 2)]) == "+o:3;-o:1,2"
    assert pending_text([], [("o", 1)]) == "-o:1"
    assert pending_text([], []) is None
    assert pending_text([("o", 3)], [], 7) == "+o:3;behind-epoch-7"


def test_members_table_shows_epochs_subscriptions_and_where_assignments_differ(
    capsys: pytest.CaptureFixture[str],
) -> None:
    header, a, b = _table(capsys, CONSUMER_MEMBERS_HEADERS, consumer_members_rows(_group()))
    assert header == [
        "GROUP",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
        "#PARTITIONS",
        "MEMBER-EPOCH",
        "SUBSCRIPTION",
        "ASSIGNMENT",
        "TARGET-ASSIGNMENT",
        "PENDING",
    ]
    assert a == [
        "g",
        "member-a",
        "/10.0.0.7",
        "client-a",
        "5",
        "5",
        "logs,orders",
        "logs:0;orders:0,1,2,3",
        "logs:0;orders:0,1",
        "-orders:2,3",
    ]
    assert b == ["g", "member-b", "/127.0.0.1", "client-b", "0", "5", "orders", "-",
                 "orders:2,3", "+orders:2,3"]  # fmt: skip


def test_state_table_has_the_type_and_epochs(capsys: pytest.CaptureFixture[str]) -> None:
    header, row = _table(capsys, CONSUMER_STATE_HEADERS, [consumer_state_row(_group())])
    assert " ".join(header) == (
        "GROUP COORDINATOR (ID) TYPE ASSIGNMENT-STRATEGY STATE GROUP-EPOCH ASSIGNMENT-EPOCH "
        "#MEMBERS"
    )
    assert row == ["g", "127.0.0.1:9093", "(2)", "consumer", "uniform", "Reconciling", "5", "5",
                   "2"]  # fmt: skip


def test_a_classic_groups_state_table_gains_only_the_type(
    capsys: pytest.CaptureFixture[str],
) -> None:
    classic = GroupView(
        "c", "Stable", (MemberView("m", "cl", "/h", (("t", 0),)),), "range", "h:1 (1)"
    )
    header, row = _table(capsys, STATE_HEADERS, [state_row(classic)])
    assert " ".join(header) == "GROUP COORDINATOR (ID) TYPE ASSIGNMENT-STRATEGY STATE #MEMBERS"
    assert row == ["c", "h:1", "(1)", "classic", "range", "Stable", "1"]
    assert describe_document(classic, [])["type"] == "classic"


def test_notes_name_the_protocol_and_each_reconciling_member() -> None:
    group = _group()
    view = consumer_group_view(group)
    assert view.group_type == "consumer" and view.member_count == 2
    # Reconciling is a rebalance, as kafka-consumer-groups.sh warns of it.
    assert group_note(view) == "Warning: Consumer group 'g' is rebalancing."
    assert protocol_note(group) == (
        "Consumer group 'g' uses the consumer protocol: group epoch 5, assignment epoch 5, "
        "assignor uniform."
    )
    assert reconciling_notes(group) == [
        "Member member-a (client client-a, epoch 5) is reconciling: to revoke orders:2,3.",
        "Member member-b (client client-b, epoch 5) is reconciling: to assign orders:2,3.",
    ]
    stable = copy.deepcopy(ANSWER)
    stable["group_state"] = "Stable"
    for member in stable["members"]:
        member["assignment"] = member["target_assignment"]
    settled = consumer_group_of(stable)
    assert reconciling_notes(settled) == []
    assert group_note(consumer_group_view(settled)) == (
        "Consumer group 'g' is Stable with 2 active members."
    )


def test_lag_rows_follow_the_current_assignment(capsys: pytest.CaptureFixture[str]) -> None:
    """The lag table's owner is the member that owns the partition now, not its target owner;
    a member that owns nothing yet gets the idle line kafka-consumer-groups.sh prints."""
    view = consumer_group_view(_group())
    committed = {("orders", 2): 7, ("orders", 0): None}
    ends = {("orders", k): 10 for k in range(4)} | {("logs", 0): 3}
    rows = lag_rows("g", committed, ends, view.members)
    lines = _table(
        capsys, DESCRIBE_HEADERS, [r.cells() for r in rows] + idle_member_rows("g", view.members)
    )
    assert lines[0] == list(DESCRIBE_HEADERS)
    assert lines[1:] == [
        ["g", "logs", "0", "-", "3", "-", "member-a", "/10.0.0.7", "client-a"],
        ["g", "orders", "0", "-", "10", "-", "member-a", "/10.0.0.7", "client-a"],
        ["g", "orders", "1", "-", "10", "-", "member-a", "/10.0.0.7", "client-a"],
        ["g", "orders", "2", "7", "10", "3", "member-a", "/10.0.0.7", "client-a"],
        ["g", "orders", "3", "-", "10", "-", "member-a", "/10.0.0.7", "client-a"],
        ["g", "-", "-", "-", "-", "-", "member-b", "/127.0.0.1", "client-b"],
    ]


def test_json_document_has_the_classic_keys_and_the_consumer_protocols() -> None:
    group = _group()
    view = consumer_group_view(group)
    rows = lag_rows("g", {("orders", 2): 7}, {("orders", 2): 10}, view.members)
    document = consumer_describe_document(group, [r.as_json() for r in rows])
    classic_keys = set(describe_document(view, rows))
    assert classic_keys <= set(document)
    assert document["type"] == "consumer" and document["state"] == "Reconciling"
    assert (document["group_epoch"], document["assignment_epoch"]) == (5, 5)
    assert document["assignment_strategy"] == "uniform" and document["member_count"] == 2
    assert document["coordinator"] == COORDINATOR
    lags = {(r["topic"], r["partition"]): r["lag"] for r in document["partitions"]}
    assert lags[("orders", 2)] == 3 and lags[("logs", 0)] is None
    a, b = document["members"]
    assert a == {
        "consumer_id": "member-a",
        "host": "/10.0.0.7",
        "client_id": "client-a",
        "group_instance_id": "static-a",
        "rack_id": "rack-1",
        "member_epoch": 5,
        "subscribed_topics": ["logs", "orders"],
        "subscribed_topic_regex": None,
        "partitions": [
            {"topic": "logs", "partition": 0},
            {"topic": "orders", "partition": 0},
            {"topic": "orders", "partition": 1},
            {"topic": "orders", "partition": 2},
            {"topic": "orders", "partition": 3},
        ],
        "target_partitions": [
            {"topic": "logs", "partition": 0},
            {"topic": "orders", "partition": 0},
            {"topic": "orders", "partition": 1},
        ],
        "reconciling": True,
        "partitions_to_assign": [],
        "partitions_to_revoke": [
            {"topic": "orders", "partition": 2},
            {"topic": "orders", "partition": 3},
        ],
    }
    assert b["partitions"] == [] and b["partitions_to_assign"] == b["target_partitions"]


def test_an_unnamed_topic_shows_its_id() -> None:
    answer = copy.deepcopy(ANSWER)
    answer["members"][1]["assignment"]["topic_partitions"][1]["topic_name"] = ""
    a = consumer_group_of(answer).members[0]
    assert (LOGS_ID, 0) in a.assignment


# -- the wire: ConsumerGroupDescribe first, GROUP_ID_NOT_FOUND falls back ----------------


class FakeCluster:
    """A WireCluster stand-in: ApiVersions, Metadata and FindCoordinator answer at once; the
    ConsumerGroupDescribe answers are given in order (None: the coordinator is down)."""

    def __init__(self, describe_answers: list[Any], *, serves: bool = True) -> None:
        self.describe_answers = list(describe_answers)
        self.serves = serves
        self.brokers: dict[int, tuple[str, int]] = {}
        self.asked: list[tuple[int | None, ApiKey, dict[str, Any]]] = []

    def request_any(self, api_key: ApiKey, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.asked.append((None, api_key, body))
        if api_key == ApiKey.API_VERSIONS:
            keys = [{"api_key": int(ApiKey.METADATA), "min_version": 0, "max_version": 12}]
            if self.serves:
                keys.append({"api_key": 69, "min_version": 0, "max_version": 0})
            return {"error_code": 0, "api_keys": keys}
        assert api_key == ApiKey.METADATA
        return {"brokers": [{"node_id": 2, "host": "127.0.0.1", "port": 9093}], "topics": []}

    def request_at(
        self, broker_id: int, api_key: ApiKey, version: int, body: dict[str, Any]
    ) -> dict[str, Any] | None:
        self.asked.append((broker_id, api_key, body))
        if api_key == ApiKey.FIND_COORDINATOR:
            return {"error_code": 0, "node_id": 2, "host": "127.0.0.1", "port": 9093}
        assert api_key == ApiKey.CONSUMER_GROUP_DESCRIBE and version == 0
        answer = self.describe_answers.pop(0)
        return None if answer is None else {"throttle_time_ms": 0, "groups": [answer]}


def _error(code: int) -> dict[str, Any]:
    return {
        "error_code": code,
        "error_message": None,
        "group_id": "g",
        "group_state": "Dead",
        "group_epoch": -1,
        "assignment_epoch": -1,
        "assignor_name": "",
        "members": [],
    }


def test_a_consumer_group_is_described_at_its_coordinator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(group_cli, "RETRY_BACKOFF_S", 0.0)
    # The coordinator moved once, then went down once: asked again each time.
    cluster = FakeCluster([_error(ErrorCode.NOT_COORDINATOR), None, copy.deepcopy(ANSWER)])
    group = describe_consumer_group(cluster, "g", 5.0)  # type: ignore[arg-type]
    assert group is not None and group.state == "Reconciling"
    assert group.coordinator == "127.0.0.1:9093 (2)"
    describes = [a for a in cluster.asked if a[1] == ApiKey.CONSUMER_GROUP_DESCRIBE]
    assert [a[0] for a in describes] == [2, 2, 2]
    assert describes[0][2] == {"group_ids": ["g"], "include_authorized_operations": False}


def test_group_id_not_found_means_ask_describe_groups() -> None:
    cluster = FakeCluster([_error(ErrorCode.GROUP_ID_NOT_FOUND)])
    assert describe_consumer_group(cluster, "g", 5.0) is None  # type: ignore[arg-type]


def test_brokers_without_the_api_are_not_asked_it() -> None:
    cluster = FakeCluster([], serves=False)
    assert describe_consumer_group(cluster, "g", 5.0) is None  # type: ignore[arg-type]
    assert [a[1] for a in cluster.asked] == [ApiKey.API_VERSIONS]


@pytest.mark.parametrize(
    ("code", "exit_code", "words"),
    [
        (ErrorCode.INVALID_GROUP_ID, ExitCode.USAGE, "not a valid group id"),
        (ErrorCode.GROUP_AUTHORIZATION_FAILED, ExitCode.FAILURE, "GROUP_AUTHORIZATION_FAILED"),
        (ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ExitCode.TIMEOUT, "did not settle"),
    ],
)
def test_other_errors_are_one_line(
    monkeypatch: pytest.MonkeyPatch, code: int, exit_code: ExitCode, words: str
) -> None:
    monkeypatch.setattr(group_cli, "RETRY_BACKOFF_S", 0.0)
    cluster = FakeCluster([_error(code)] * 1000)
    with pytest.raises(CliError) as caught:
        describe_consumer_group(cluster, "g", 0.05)  # type: ignore[arg-type]
    assert caught.value.code == exit_code and words in caught.value.message
    assert "'g'" in caught.value.message or "'g'" in str(caught.value)


# -- list --type -------------------------------------------------------------------------


def test_types_are_kafkas_names() -> None:
    assert parse_group_types(None) == []
    assert parse_group_types(["consumer"]) == ["consumer"]
    assert parse_group_types(["Classic,consumer", "classic"]) == ["classic", "consumer"]
    for bad in (["bogus"], ["classic,share"], [""]):
        with pytest.raises(ValueError, match="--type"):
            parse_group_types(bad)
    assert group_type_name(ConsumerGroupType.CONSUMER) == "consumer"
    assert group_type_name(ConsumerGroupType.CLASSIC) == "classic"
    assert group_type_name(ConsumerGroupType.UNKNOWN) is None
    assert group_type_name("Consumer") == "consumer"


def test_a_bad_type_is_refused_before_any_connection(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli_app.app,
        ["--data-dir", str(tmp_path / "none"), "group", "list", "--type", "share"],
        env={"RLOG_BOOTSTRAP": "", "RLOG_BROKERS": ""},
    )
    assert isinstance(result.exception, CliError), (result.exception, result.output)
    assert result.exception.code == ExitCode.USAGE and "bad --type 'share'" in (
        result.exception.message
    )
