"""The nemesis of a verify run: named scenarios, or `rlog chaos schedule`'s seeded plan.

Every fault goes through rlogd's control socket, so nemeses run only against an rlog cluster.
The seed decides the gaps, the hold times and which partition's leader is hit; the leader
itself is whoever leads that partition when the fault starts.

- kill-leader: SIGKILL a partition's leader; rlogd restarts it (by its restart policy).
- pause-leader: SIGSTOP a partition's leader, then SIGCONT.
- isolate-leader: cut a partition's leader off every other broker and the controller while
  clients still reach it (Jepsen's classic partition): it stays leader in its own eyes until
  its session ends, and what it accepts meanwhile with acks=1 is lost when it rejoins.
- kill-controller: SIGKILL the controller.
- restart-all: SIGKILL the controller and every broker at once (rlogd restarts them).
- schedule: `rlog chaos schedule`'s plan for the seed: kills, pauses, partitions, delays and
  disk faults on any process.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rlog.cli import nemesis

SCENARIOS = (
    "none",
    "kill-leader",
    "pause-leader",
    "isolate-leader",
    "kill-controller",
    "restart-all",
    "schedule",
)
GAP_S = (1.0, 2.5)  # quiet time before each fault
HOLD_S = (1.0, 3.0)  # how long a pause lasts
# An isolated leader must stay cut off past the broker session timeout, or nobody replaces it.
ISOLATE_EXTRA_S = 2.0

Apply = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass
class Nemesis:
    scenario: str
    seed: int
    apply: Apply  # one rlogd control request -> its reply
    leader_of: Callable[[int], int | None]  # partition -> its leader's broker id, if known
    partitions: int
    brokers: list[str]  # rlogd's names: broker-1, ...
    session_timeout_s: float
    report: Callable[[str], None]

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.faults = 0
        self.paused: set[str] = set()

    def run(self, stop: threading.Event, seconds: float) -> None:
        """Inject faults until `stop` is set (or `seconds` pass for a schedule)."""
        if self.scenario == "none":
            return
        if self.scenario == "schedule":
            self._schedule(stop, seconds)
            return
        while not stop.wait(self.rng.uniform(*GAP_S)):
            self._fault(stop)

    def heal(self) -> None:
        """Undo whatever is still in effect: links, delays and disks, and paused processes."""
        if self.scenario == "none":
            return
        self._request({"op": "heal"})
        for target in sorted(self.paused):
            self._request({"op": "resume", "target": target})
        self.paused.clear()

    def _fault(self, stop: threading.Event) -> None:
        scenario = self.scenario
        if scenario == "kill-controller":
            self._request({"op": "kill", "target": nemesis.CONTROLLER})
            return
        if scenario == "restart-all":
            for target in [nemesis.CONTROLLER, *self.brokers]:
                self._request({"op": "kill", "target": target})
            return
        partition = self.rng.randrange(self.partitions)
        leader = self.leader_of(partition)
        if leader is None:
            self.report(f"p{partition} has no leader now: no fault this round")
            return
        target = f"broker-{leader}"
        if scenario == "kill-leader":
            self._request({"op": "kill", "target": target})
        elif scenario == "pause-leader":
            if self._request({"op": "pause", "target": target}):
                stop.wait(self.rng.uniform(*HOLD_S))
                self._request({"op": "resume", "target": target})
        elif scenario == "isolate-leader":
            others = [b for b in self.brokers if b != target] + [nemesis.CONTROLLER]
            for other in others:
                self._request({"op": "partition", "targets": [target, other]})
            hold = self.session_timeout_s + self.rng.uniform(0, ISOLATE_EXTRA_S)
            stop.wait(hold)
            self._request({"op": "heal"})
        else:
            raise ValueError(f"unknown scenario {scenario!r}")

    def _schedule(self, stop: threading.Event, seconds: float) -> None:
        nemesis.run(nemesis.plan(self.seed, seconds, self.brokers), self._send, self.report, stop)

    def _request(self, request: dict[str, Any]) -> bool:
        """Send one request and report it in one line; whether rlogd did it."""
        reply = self._send(request)
        label = " ".join(
            [request["op"]]
            + [
                str(v) if not isinstance(v, list) else "/".join(v)
                for k, v in request.items()
                if k != "op"
            ]
        )
        if reply.get("ok"):
            self.report(f"{label}: {reply.get('message', 'done')}")
            return True
        self.report(f"{label}: refused: {reply.get('error')}")
        return False

    def _send(self, request: dict[str, Any]) -> dict[str, Any]:
        """Every request goes through here: faults rlogd made are counted (a refused one, say a
        kill of a process still restarting, is none), paused processes remembered (for
        `heal`)."""
        reply = self.apply(request)
        if not reply.get("ok"):
            return reply
        op, target = request["op"], request.get("target", "")
        if op == "pause":
            self.paused.add(target)
        elif op == "resume":
            self.paused.discard(target)
        self.faults += not _undoes(request)
        return reply


def _undoes(request: dict[str, Any]) -> bool:
    """A request that takes a fault back rather than making one."""
    op = request["op"]
    return (
        op in ("heal", "resume")
        or (op == "delay" and not request["ms"])
        or (op == "disk" and request["state"] == "ok")
    )
