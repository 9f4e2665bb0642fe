"""``rlog group delete-offsets`` without a broker: the --topic forms, the answer's table, the
errors it turns into, and the flags refused before any connection is tried."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from rlog.cli import app as cli_app
from rlog.cli.group import (
    DeletedOffset,
    delete_offsets_error,
    deleted_offsets,
    parse_delete_offsets_topics,
    partition_failures_error,
)
from rlog.cli.terminal import CliError, ExitCode
from rlog.core.protocol.errors import ErrorCode


def test_topics_with_and_without_partitions() -> None:
    assert parse_delete_offsets_topics(["orders:2,0", "refunds", "orders:1"]) == [
        ("orders", [0, 1, 2]),
        ("refunds", []),  # every partition
    ]
    # A topic named whole anywhere is deleted whole.
    assert parse_delete_offsets_topics(["orders:1", "orders"]) == [("orders", [])]
    assert parse_delete_offsets_topics(["orders", "orders:1"]) == [("orders", [])]


@pytest.mark.parametrize("topics", [[], ["orders:"], [":1"], ["orders:x"], ["orders:-1"]])
def test_bad_topics_are_refused(topics: list[str]) -> None:
    with pytest.raises(ValueError, match=r"TOPIC|partitions"):
        parse_delete_offsets_topics(topics)


def test_the_answer_reads_as_kafkas_table() -> None:
    answer = {
        "error_code": 0,
        "topics": [
            {
                "name": "orders",
                "partitions": [
                    {"partition_index": 1, "error_code": 0},
                    {"partition_index": 0, "error_code": ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC},
                ],
            },
            {"name": "logs", "partitions": [{"partition_index": 0, "error_code": 3}]},
        ],
    }
    rows = deleted_offsets(answer)
    assert [r.cells() for r in rows] == [
        ("logs", 0, "Error: UNKNOWN_TOPIC_OR_PARTITION"),
        ("orders", 0, "Error: GROUP_SUBSCRIBED_TO_TOPIC"),
        ("orders", 1, "Successful"),
    ]
    assert rows[2].as_json() == {"topic": "orders", "partition": 1, "error": None}


def test_partition_failures_name_the_subscribed_topic() -> None:
    assert partition_failures_error("g", [DeletedOffset("orders", 0, None)]) is None
    error = partition_failures_error(
        "g",
        [
            DeletedOffset("orders", 0, "GROUP_SUBSCRIBED_TO_TOPIC"),
            DeletedOffset("orders", 1, "GROUP_SUBSCRIBED_TO_TOPIC"),
        ],
    )
    assert error is not None and error.code == ExitCode.FAILURE
    assert "'orders'" in error.message and "subscribe" in error.message
    other = partition_failures_error(
        "g",
        [DeletedOffset("a", 0, "UNKNOWN_TOPIC_OR_PARTITION"), DeletedOffset("a", 1, "X")],
    )
    assert other is not None and "a partition 0: UNKNOWN_TOPIC_OR_PARTITION (and 1 more)" in (
        other.message
    )


@pytest.mark.parametrize(
    ("code", "exit_code", "words"),
    [
        (ErrorCode.GROUP_ID_NOT_FOUND, ExitCode.NOT_FOUND, "does not exist"),
        (ErrorCode.NON_EMPTY_GROUP, ExitCode.FAILURE, "active members"),
        (ErrorCode.INVALID_GROUP_ID, ExitCode.USAGE, "not a valid group id"),
        (ErrorCode.NOT_COORDINATOR, ExitCode.TIMEOUT, "did not settle"),
        (ErrorCode.UNKNOWN_SERVER_ERROR, ExitCode.FAILURE, "UNKNOWN_SERVER_ERROR"),
    ],
)
def test_top_level_errors(code: ErrorCode, exit_code: ExitCode, words: str) -> None:
    error = delete_offsets_error("g", code)
    assert error.code == exit_code and words in error.message and "'g'" in error.message


runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["g", "--topic", "orders:"], "bad --topic"),
        (["g", "--topic", "orders:a"], "bad --topic"),
        (["", "--topic", "orders"], "must not be empty"),
    ],
)
def test_usage_errors_come_before_any_connection(
    tmp_path: Path, args: list[str], words: str
) -> None:
    result = runner.invoke(
        cli_app.app,
        ["--data-dir", str(tmp_path / "none"), "group", "delete-offsets", *args],
        env={"RLOG_BOOTSTRAP": "", "RLOG_BROKERS": ""},
    )
    assert isinstance(result.exception, CliError), (result.exception, result.output)
    assert result.exception.code == ExitCode.USAGE
    assert words in result.exception.message


def test_a_missing_topic_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(
        cli_app.app, ["--data-dir", str(tmp_path / "none"), "group", "delete-offsets", "g"]
    )
    assert result.exit_code == ExitCode.USAGE and "--topic" in result.output
