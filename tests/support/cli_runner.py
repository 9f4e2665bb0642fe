"""The real `rlog` command in a subprocess, and the checks its tests make of what it printed."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import subprocess
import sys
import tempfile
import time
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


def run_on_a_pty(
    args: list[str],
    env: dict[str, str],
    *,
    stdin_path: Path | None = None,
    stdout_on_the_pty: bool = False,
    timeout: float = COMMAND_TIMEOUT_S,
) -> tuple[int, str, str]:
    """Run rlog with stderr (and with `stdout_on_the_pty`, stdout too) on a pseudo-terminal;
    (exit code, what it wrote to stdout, a file here, what the terminal showed)."""
    controller, terminal = pty.openpty()
    with contextlib.ExitStack() as files:
        stdin = files.enter_context(open(stdin_path, "rb")) if stdin_path else subprocess.DEVNULL
        # A file, not a pipe: nobody has to drain it while the terminal is read.
        output = files.enter_context(tempfile.TemporaryFile())
        process = subprocess.Popen(
            [*RLOG, *args],
            stdin=stdin,
            stdout=terminal if stdout_on_the_pty else output,
            stderr=terminal,
            env=env,
            start_new_session=True,
        )
        os.close(terminal)
        shown = b""
        try:
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                ready, _, _ = select.select([controller], [], [], 0.1)
                if ready:
                    try:
                        chunk = os.read(controller, 4096)
                    except OSError:  # the process closed the pty
                        break
                    if not chunk:
                        break
                    shown += chunk
                elif process.poll() is not None:
                    break
            process.wait(timeout=timeout)
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
            os.close(controller)
        output.seek(0)
        stdout = output.read()
    return process.returncode, stdout.decode(), shown.decode(errors="replace")
