"""kafkajs (npm), through a small node script of ours.

tests/interop/kafkajs/ keeps package.json (kafkajs pinned), package-lock.json (its integrity
hash) and client.js, the script the tests run. The package is installed with `npm ci` into the
user's cache directory (`$XDG_CACHE_HOME/rlog/interop/kafkajs-<version>-<hash>/node_modules`),
keyed on a hash of package.json and the lock, so a new pin installs again. The script runs from
the checkout with NODE_PATH pointing at that node_modules. It takes a sub-command and options,
and prints JSON lines (see client.js).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from support.held_process import held_until
from support.kafka_tools import cache_dir

SOURCE_DIR = Path(__file__).resolve().parents[1] / "interop" / "kafkajs"
SCRIPT = SOURCE_DIR / "client.js"
MANIFESTS = ("package.json", "package-lock.json")


class KafkajsUnavailable(RuntimeError):
    """node or npm is missing, or npm could not install kafkajs."""


def pinned_version() -> str:
    return json.loads((SOURCE_DIR / "package.json").read_text())["dependencies"]["kafkajs"]


def manifest_hash() -> str:
    digest = hashlib.sha256()
    for name in MANIFESTS:
        digest.update(name.encode() + b"\0" + (SOURCE_DIR / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def fetch() -> Path:
    """The node_modules directory holding kafkajs, installed on first use. A lock keeps two
    test processes from installing into the same directory at once."""
    home = cache_dir() / f"kafkajs-{pinned_version()}-{manifest_hash()}"
    modules = home / "node_modules"
    done = home / ".complete"
    if done.exists():
        return modules
    if shutil.which("node") is None:
        raise KafkajsUnavailable("node (Node.js) is not installed: kafkajs runs on it")
    npm = shutil.which("npm")
    if npm is None:
        raise KafkajsUnavailable("npm is not installed: it fetches kafkajs")
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return modules
        for name in MANIFESTS:
            shutil.copyfile(SOURCE_DIR / name, home / name)
        # npm ci installs exactly the lock's versions (and checks their hashes); kafkajs has no
        # install scripts and no dependencies of its own.
        result = subprocess.run(
            [npm, "ci", "--ignore-scripts", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=home, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        if result.returncode != 0:
            tail = (result.stdout + result.stderr).strip().splitlines()[-8:]
            raise KafkajsUnavailable(f"npm ci of kafkajs failed: {' | '.join(tail)}")
        done.write_text(pinned_version())
    return modules


@dataclass(frozen=True)
class Kafkajs:
    """Runs client.js against one cluster."""

    node_modules: Path
    bootstrap: str

    def command(self, sub_command: str, *args: str, timeout_s: float) -> list[str]:
        node = shutil.which("node")
        assert node is not None
        # The script's own deadline comes first, so it fails with a message before we kill it.
        return [node, str(SCRIPT), sub_command, "--brokers", self.bootstrap,
                "--timeout-ms", str(int(timeout_s * 1000)), *args]  # fmt: skip

    def environment(self) -> dict[str, str]:
        return {**os.environ, "NODE_PATH": str(self.node_modules),
                "KAFKAJS_NO_PARTITIONER_WARNING": "1"}  # fmt: skip

    def run(
        self, sub_command: str, *args: str, timeout_s: float = 60.0
    ) -> tuple[int, list[dict[str, Any]], str]:
        """(exit code, JSON lines, stderr) of a sub-command."""
        done = subprocess.run(
            self.command(sub_command, *args, timeout_s=timeout_s), capture_output=True,
            text=True, timeout=timeout_s + 10, stdin=subprocess.DEVNULL, env=self.environment(),
        )  # fmt: skip
        lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
        return done.returncode, lines, done.stderr

    def lines(self, sub_command: str, *args: str, timeout_s: float = 60.0) -> list[dict[str, Any]]:
        """Run a sub-command, which must succeed; its JSON lines."""
        code, lines, stderr = self.run(sub_command, *args, timeout_s=timeout_s)
        assert code == 0, (
            f"kafkajs {sub_command} {' '.join(args)} exited {code}:\n{lines}\n{stderr}"
        )
        return lines

    def one(self, sub_command: str, *args: str, timeout_s: float = 60.0) -> dict[str, Any]:
        """Run a sub-command that prints exactly one JSON line; that line."""
        lines = self.lines(sub_command, *args, timeout_s=timeout_s)
        assert len(lines) == 1, f"kafkajs {sub_command}: {len(lines)} lines, not one: {lines}"
        return lines[0]

    def error(self, sub_command: str, *args: str, timeout_s: float = 60.0) -> dict[str, Any]:
        """Run a sub-command that must fail; its error line (name, type, causes)."""
        code, lines, stderr = self.run(sub_command, *args, timeout_s=timeout_s)
        assert code == 1 and lines and lines[-1]["event"] == "error", (
            f"kafkajs {sub_command} {' '.join(args)} did not fail (exit {code}):\n{lines}\n{stderr}"
        )
        return lines[-1]

    @contextmanager
    def held_consumer(self, *args: str, timeout_s: float = 60.0) -> Iterator[list[dict[str, Any]]]:
        """`consume --hold` with `args`: yields the lines it printed once it has read and
        committed its records, while it is still a member of its group; on exit it closes its
        stdin, so it leaves the group and ends. It is killed (by its pid) if it has not ended
        in time."""
        with held_until(
            self.command("consume", *args, "--hold", timeout_s=timeout_s),
            "holding",
            env=self.environment(),
        ) as lines:
            yield lines
