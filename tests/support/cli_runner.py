"""The real `rlog` command in a subprocess, and the checks its tests make of what it printed."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

RLOG = [sys.executable, "-m", "rlog.cli.app"]
COMMAND_TIMEOUT_S = 60


@dataclass
class Result:
    code: int
    out: str
    err: str


def clean_env(data_dir: Path | None = None) -> dict[str, str]:
    """This environment without the caller's RLOG_* settings and colors; `data_dir` becomes
    RLOG_DATA_DIR."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLOG_")}
    if data_dir is not None:
        env["RLOG_DATA_DIR"] = str(data_dir)
    env["NO_COLOR"] = "1"
    return env


def rlog(
    *args: str,
    data_dir: Path | None = None,
    stdin: str | None = None,
    timeout: float = COMMAND_TIMEOUT_S,
    env: dict[str, str] | None = None,
) -> Result:
    done = subprocess.run(
        [*RLOG, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env if env is not None else clean_env(data_dir),
        stdin=None if stdin is not None else subprocess.DEVNULL,
    )
    return Result(done.returncode, done.stdout, done.stderr)


def ok(result: Result) -> Result:
    assert result.code == 0, f"exit {result.code}\nstdout: {result.out}\nstderr: {result.err}"
    assert "Traceback" not in result.err, result.err
    return result


def one_line_error(result: Result, code: int, *words: str) -> str:
    """The command failed with ``code`` and said so in one stderr line, no traceback."""
    lines = result.err.strip().splitlines()
    assert result.code == code, f"exit {result.code}, want {code}: {result.err!r}"
    assert len(lines) == 1, f"want one error line, got: {result.err!r}"
    assert lines[0].startswith("rlog: error: "), lines[0]
    assert "Traceback" not in result.err
    for word in words:
        assert word in lines[0], f"{word!r} not in {lines[0]!r}"
    return lines[0]
