"""Messages a new user met (issue: rough edges): each refusal is one plain sentence naming the
flag or topic at fault and what is allowed, not a library's raw error; and the root options work
after the command as well as before it."""

from __future__ import annotations

import pytest

from rlog.cli.terminal import ExitCode
from support.cli_runner import one_line_error, rlog

pytestmark = pytest.mark.integration


def test_an_unknown_client_property_names_the_flag(cluster) -> None:
    produced = rlog("produce", "t", "-X", "nosuch.prop=1", data_dir=cluster.data_dir, stdin="x\n")
    line = one_line_error(produced, ExitCode.USAGE, "-X nosuch.prop", "no producer property")
    assert "KafkaError{" not in line and "_INVALID_ARG" not in line
    consumed = rlog("consume", "t", "-e", "-X", "nosuch.prop=1", data_dir=cluster.data_dir)
    one_line_error(consumed, ExitCode.USAGE, "-X nosuch.prop", "no consumer property")


def test_a_refused_client_value_names_the_flag_and_the_rule(cluster) -> None:
    done = rlog("produce", "t", "-X", "linger.ms=-5", data_dir=cluster.data_dir, stdin="x\n")
    line = one_line_error(done, ExitCode.USAGE, "-X linger.ms=-5", "outside allowed range")
    assert "KafkaError{" not in line


def test_producing_to_an_internal_topic_says_it_is_internal(cluster) -> None:
    done = rlog("produce", "__consumer_offsets", data_dir=cluster.data_dir, stdin="x\n")
    line = one_line_error(done, ExitCode.USAGE, "'__consumer_offsets' is an internal topic")
    assert "TOPIC_EXCEPTION" not in line


def test_a_bad_choice_has_no_validation_library_prefix(tmp_path) -> None:
    done = rlog("produce", "t", "--acks", "2", data_dir=tmp_path, stdin="")
    line = one_line_error(done, ExitCode.USAGE, "--acks", "'2' is not one of '0', '1', 'all'")
    assert "Value error" not in line


def test_root_options_work_after_the_command(cluster) -> None:
    produced = rlog("produce", "t", "--timeout", "5", data_dir=cluster.data_dir, stdin="a\n")
    assert produced.code == 0, produced.err
    read = rlog(
        "consume", "t", "--from-beginning", "-e", "--timeout=5", "-v", data_dir=cluster.data_dir
    )
    assert read.code == 0 and read.out == "a\n", read.err
    # --color after the command colours the error as before it
    unreachable = rlog("topic", "list", "--bootstrap", "127.0.0.1:1", "--color", "always")
    assert unreachable.code == ExitCode.UNREACHABLE and "\x1b[" in unreachable.err
