"""A client process held in the middle of its work: the franz-go and kafkajs test programs'
`consume --hold`, which print JSON lines, then wait for their stdin to close."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any


@contextmanager
def held_until(
    command: list[str], event: str, *, env: dict[str, str] | None = None
) -> Iterator[list[dict[str, Any]]]:
    """Start `command` and yield the JSON lines it printed up to the first whose "event" is
    `event`, while it still runs; on exit close its stdin so it ends (exit 0 expected). It is
    killed (by its pid) if it has not ended in time."""
    # stderr to a file: a pipe nobody reads could fill and stall the process.
    with tempfile.TemporaryFile("w+") as errors:
        process = subprocess.Popen(
            command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errors, text=True,
            env=env, start_new_session=True,
        )  # fmt: skip
        assert process.stdin is not None and process.stdout is not None
        try:
            lines: list[dict[str, Any]] = []
            # The program's own deadline bounds these reads: at worst it exits, and stdout ends.
            for text in process.stdout:
                lines.append(json.loads(text))
                if lines[-1]["event"] == event:
                    break
            else:
                process.wait(timeout=10)
                raise AssertionError(
                    f"the held process ended before '{event}' (exit {process.returncode}):"
                    f"\n{lines}\n{read_all(errors)}"
                )
            yield lines
            process.stdin.close()
            assert process.wait(timeout=30) == 0, read_all(errors)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
            process.stdin.close()
            process.stdout.close()


def read_all(file: IO[str]) -> str:
    file.seek(0)
    return file.read()
