"""A long rlog produce or consume shows a progress line on a terminal (records, rate, and
acknowledged records or lag), rewritten in place and erased at the end, while stdout keeps only
records; nothing of it reaches a pipe, and consume shows none beside records on the same
terminal."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from support.cli_runner import clean_env, ok, rlog, run_on_a_pty

pytestmark = pytest.mark.integration

RECORDS = 200_000
LIVE = "\r\x1b[K"


def lines(tmp_path: Path, count: int) -> Path:
    path = tmp_path / "input.txt"
    path.write_text("".join(f"record-{i}\n" for i in range(count)))
    return path


def test_produce_shows_its_progress_on_a_terminal(cluster, tmp_path: Path) -> None:
    env = clean_env(cluster.data_dir)
    code, stdout, shown = run_on_a_pty(
        ["produce", "progress"], env, stdin_path=lines(tmp_path, RECORDS)
    )
    assert code == 0, shown
    assert stdout == ""
    updates = re.findall(r"% (\d+) records sent to progress, \d+ acknowledged", shown)
    sent = [int(n) for n in updates]
    assert sent and sent == sorted(sent), repr(shown[:500])
    assert shown.endswith(LIVE) and "\n" not in shown  # erased at the end, never scrolled
    # the same command into a pipe: nothing but what it printed before
    piped = ok(rlog("produce", "progress", data_dir=cluster.data_dir, stdin="one more\n"))
    assert piped.err == ""


def test_consume_to_a_file_shows_its_progress_and_lag(cluster, tmp_path: Path) -> None:
    ok(rlog("produce", "lagging", data_dir=cluster.data_dir, stdin="x\n" * 50_000))
    env = clean_env(cluster.data_dir)
    args = ["consume", "lagging", "--from-beginning", "-e"]
    code, stdout, shown = run_on_a_pty(args, env)
    assert code == 0, shown
    assert stdout == "x\n" * 50_000
    assert re.search(r"% \d+ records from lagging, [\d,]+ records/s", shown), repr(shown)
    assert "Reached end of topic lagging [0] at offset 50000: exiting" in shown
    # beside the records on one terminal, no progress line
    code, _, same_terminal = run_on_a_pty(args, env, stdout_on_the_pty=True)
    assert code == 0 and LIVE not in same_terminal
