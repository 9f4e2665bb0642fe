"""franz-go (github.com/twmb/franz-go: kgo and kadm), through a small Go program of ours.

The program's sources are kept in tests/interop/franz/ (main.go, go.mod, go.sum: go.sum pins
every module, which the go command fetches from the Go module proxy). It is built once with
`go build` into the user's cache directory (`$XDG_CACHE_HOME/rlog/interop/franz-go-<hash>/`),
keyed on a hash of its sources, so an edit builds it again and an unchanged checkout reuses it.
The modules themselves stay in Go's own module cache, as for any Go build. The program takes
a sub-command and flags, and prints JSON lines (see main.go).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.held_process import held_until
from support.kafka_tools import cache_dir

SOURCE_DIR = Path(__file__).resolve().parents[1] / "interop" / "franz"
SOURCES = ("go.mod", "go.sum", "main.go")
FRANZ_GO_VERSION = "v1.22.3"  # with kadm v1.20.0: the newest the Go module proxy serves


class FranzGoUnavailable(RuntimeError):
    """go is missing, or the program could not be built."""


def source_hash() -> str:
    digest = hashlib.sha256()
    for name in SOURCES:
        digest.update(name.encode() + b"\0" + (SOURCE_DIR / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def fetch() -> Path:
    """The built program, built on first use (and after any change to its sources). A lock
    keeps two test processes from building into the same directory at once."""
    home = cache_dir() / f"franz-go-{FRANZ_GO_VERSION}-{source_hash()}"
    binary = home / "franz"
    done = home / ".complete"
    if done.exists():
        return binary
    go = shutil.which("go")
    if go is None:
        raise FranzGoUnavailable("go is not installed: the franz-go interop program needs it")
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return binary
        partial = home / "franz.partial"
        # -mod=readonly: go.mod and go.sum are used as committed, never rewritten; no VCS
        # stamping, so the build needs neither git nor a checkout.
        result = subprocess.run(
            [go, "build", "-mod=readonly", "-buildvcs=false", "-trimpath", "-o", str(partial),
             "."],
            cwd=SOURCE_DIR, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        if result.returncode != 0:
            tail = (result.stdout + result.stderr).strip().splitlines()[-8:]
            raise FranzGoUnavailable(f"go build of {SOURCE_DIR} failed: {' | '.join(tail)}")
        partial.replace(binary)
        done.write_text(source_hash())
    return binary


@dataclass(frozen=True)
class FranzGo:
    """Runs the franz-go program against one cluster."""

    binary: Path
    bootstrap: str

    def command(self, sub_command: str, *args: str, timeout_s: float) -> list[str]:
        # The program's own deadline comes first, so it fails with a message before we kill it.
        return [str(self.binary), "-brokers", self.bootstrap, "-timeout", f"{timeout_s:.0f}s",
                sub_command, *args]  # fmt: skip

    def run(
        self, sub_command: str, *args: str, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.command(sub_command, *args, timeout_s=timeout_s), capture_output=True,
            text=True, timeout=timeout_s + 10, stdin=subprocess.DEVNULL,
        )  # fmt: skip

    def lines(self, sub_command: str, *args: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Run a sub-command, which must exit 0; its JSON lines."""
        done = self.run(sub_command, *args, timeout_s=timeout_s)
        assert done.returncode == 0, (
            f"franz {sub_command} {' '.join(args)} exited {done.returncode}:\n"
            f"{done.stdout}\n{done.stderr}"
        )
        return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]

    def one(self, sub_command: str, *args: str, timeout_s: float = 60.0) -> dict[str, Any]:
        """Run a sub-command that prints exactly one JSON line; that line."""
        lines = self.lines(sub_command, *args, timeout_s=timeout_s)
        assert len(lines) == 1, f"franz {sub_command}: {len(lines)} lines, not one: {lines}"
        return lines[0]

    @contextmanager
    def held_consumer(self, *args: str, timeout_s: float = 60.0) -> Iterator[list[dict[str, Any]]]:
        """`consume -hold` with `args`: yields the lines it printed up to its commit, while it
        is still a member of its group; on exit it closes its stdin, so it leaves the group and
        ends. It is killed (by its pid) if it has not ended in time."""
        with held_until(
            self.command("consume", *args, "-hold", timeout_s=timeout_s), "committed"
        ) as lines:
            yield lines
