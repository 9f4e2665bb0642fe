"""Group members as subprocesses (tests/support/group_member.py), followed through their output."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from support.replication import CONFIG, wait_for

MEMBER_SCRIPT = Path(__file__).with_name("group_member.py")
STOP_TIMEOUT_S = 15.0
# Longer than the clients' default request timeouts (kafka-python 30 s, aiokafka 40 s): a request
# that a client gives up on and sends again must not fail a test that waits on a member.
MEMBER_WAIT_TIMEOUT_S = 60.0

# The replication tests' cluster (RF=3, min.insync=2, 3 s broker sessions), with a small
# __consumer_offsets and no initial rebalance delay.
GROUP_CONFIG = (
    CONFIG
    + """"offsets.topic.num.partitions" = 4
"group.initial.rebalance.delay.ms" = 0
"group.min.session.timeout.ms" = 1000
"""
)


class MemberExited(Exception):
    """A member process ended before what a test waited for (not an AssertionError: the wait
    must stop at once, not take it for "not yet")."""


class MemberProcess:
    def __init__(
        self,
        directory: Path,
        name: str,
        *,
        client: str,
        bootstrap: str,
        group: str,
        topic: str,
        commit: str = "manual",
        slow_value: str | None = None,
        session_timeout_ms: int = 3000,
        instance_id: str | None = None,
        assignor: str | None = None,
        protocol: str = "classic",
    ) -> None:
        self.name = name
        self.output = directory / f"{name}.jsonl"
        self.log = directory / f"{name}.err"
        command = [
            sys.executable, str(MEMBER_SCRIPT), "--client", client, "--bootstrap", bootstrap,
            "--group", group, "--topic", topic, "--commit", commit,
            "--session-timeout-ms", str(session_timeout_ms), "--protocol", protocol,
        ]  # fmt: skip
        if slow_value is not None:
            command += ["--slow-value", slow_value]
        if instance_id is not None:
            command += ["--instance-id", instance_id]
        if assignor is not None:
            command += ["--assignor", assignor]
        with open(self.output, "wb") as out, open(self.log, "wb") as err:
            self.process = subprocess.Popen(command, stdout=out, stderr=err)

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        found = []
        for line in self.output.read_text().splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by a SIGKILL
            if kind is None or event["event"] == kind:
                found.append(event)
        return found

    @property
    def assignment(self) -> list[int] | None:
        assigned = self.events("assigned")
        return assigned[-1]["partitions"] if assigned else None

    def records(self) -> list[dict[str, Any]]:
        return self.events("record")

    def wait_for(
        self, what: str, check: Callable[[], bool], timeout_s: float = MEMBER_WAIT_TIMEOUT_S
    ) -> None:
        def reached() -> bool:
            if check():
                return True
            if self.process.poll() is not None:
                raise MemberExited(f"{self.name} exited ({self.process.returncode}) before {what}")
            return False

        try:
            wait_for(what, reached, timeout_s, every_s=0.1)
        except AssertionError:
            raise AssertionError(
                f"{self.name}: no {what} within {timeout_s} s; last: {self.events()[-3:]}; "
                f"its client's log ends:\n{self.log_tail()}"
            ) from None

    def log_tail(self, lines: int = 40) -> str:
        """The end of what the client library logged (stderr): why a join did not finish."""
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def kill(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGKILL)
        self.process.wait(STOP_TIMEOUT_S)

    def stop(self) -> None:
        """SIGTERM: the member closes its consumer, which leaves the group."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill()


def wait_until(
    what: str,
    check: Callable[[], bool],
    timeout_s: float = 30,
    members: Sequence[MemberProcess] = (),
) -> None:
    """Wait for `check`; on a timeout, say what each of `members` last reported."""
    try:
        wait_for(what, check, timeout_s, every_s=0.1)
    except AssertionError:
        seen = {m.name: (m.process.poll(), m.events()[-3:]) for m in members}
        logs = "".join(f"\n--- {m.name}'s client log ends:\n{m.log_tail(15)}" for m in members)
        raise AssertionError(
            f"no {what} within {timeout_s} s; members' exit codes, events: {seen}{logs}"
        ) from None


def split_evenly(members: list[MemberProcess], partitions: int) -> bool:
    """Every member owns a share, the shares are disjoint and cover every partition."""
    owned = [m.assignment or [] for m in members]
    flat = sorted(p for share in owned for p in share)
    return flat == list(range(partitions)) and all(
        abs(len(share) - partitions / len(members)) < 1 for share in owned
    )
