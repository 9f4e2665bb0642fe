"""``rlog chaos schedule``: a random, reproducible sequence of faults, like a Jepsen nemesis.

The seed alone decides the plan: which fault, on which process, when, and for how long, so a run
that broke something is replayed by giving the same seed (``--dry-run`` prints the plan without
touching anything). Faults come one at a time and each is undone before the next starts: a kill
(rlogd's restart policy brings the process back), a pause then resume, a partition then heal, a
delay then none, a full or stalled disk then ok. At the end everything is healed.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FAULTS = ("kill", "pause", "partition", "isolate", "delay", "disk-full", "disk-stall")
GAP_S = (0.5, 2.0)  # quiet time before each fault
HOLD_S = (1.0, 4.0)  # how long a fault lasts before it is undone
DELAYS_MS = (50, 200, 500)
CONTROLLER = "controller"


@dataclass(frozen=True)
class Step:
    at_s: float
    request: dict[str, Any]

    def describe(self) -> str:
        request = self.request
        op = request["op"]
        if op == "partition":
            rest = " ".join(request["targets"]) + (" --clients" if request.get("clients") else "")
        elif op == "heal":
            rest = ""
        elif op == "delay":
            rest = f"{request['target']} --ms {request['ms']}"
        elif op == "disk":
            rest = f"{request['target']} {request['state']}"
        else:
            rest = request["target"]
        return f"+{self.at_s:6.2f}s  {op} {rest}".rstrip()


def plan(seed: int, seconds: float, brokers: list[str]) -> list[Step]:
    """The faults for `seconds`, decided by `seed` alone; the last step heals everything."""
    rng = random.Random(seed)
    steps: list[Step] = []
    now = 0.0
    while True:
        start = now + rng.uniform(*GAP_S)
        end = start + rng.uniform(*HOLD_S)
        if end >= seconds:
            break
        fault = rng.choice(FAULTS)
        target = rng.choice(brokers)
        steps.extend(_fault(rng, fault, target, brokers, start, end))
        now = end
    steps.append(Step(round(max(now, seconds), 2), {"op": "heal"}))
    return steps


def _fault(
    rng: random.Random, fault: str, target: str, brokers: list[str], start: float, end: float
) -> list[Step]:
    start, end = round(start, 2), round(end, 2)
    if fault == "kill":
        return [Step(start, {"op": "kill", "target": rng.choice([*brokers, CONTROLLER])})]
    if fault == "pause":
        return [
            Step(start, {"op": "pause", "target": target}),
            Step(end, {"op": "resume", "target": target}),
        ]
    if fault in ("partition", "isolate"):
        others = [b for b in brokers if b != target] or [CONTROLLER]
        if fault == "partition":
            cut = [{"op": "partition", "targets": [target, rng.choice(others)]}]
        else:  # the broker loses everyone: brokers, controller and clients
            cut = [
                {"op": "partition", "targets": [target, other], "clients": index == 0}
                for index, other in enumerate([*others, CONTROLLER])
            ]
        return [Step(start, request) for request in cut] + [Step(end, {"op": "heal"})]
    if fault == "delay":
        delay = {"op": "delay", "target": target, "ms": rng.choice(DELAYS_MS)}
        return [Step(start, delay), Step(end, {"op": "delay", "target": target, "ms": 0})]
    state = "full" if fault == "disk-full" else "stall"
    return [
        Step(start, {"op": "disk", "target": target, "state": state}),
        Step(end, {"op": "disk", "target": target, "state": "ok"}),
    ]


def run(
    steps: list[Step],
    apply: Callable[[dict[str, Any]], dict[str, Any]],
    report: Callable[[str], None],
    stop: threading.Event | None = None,
) -> int:
    """Apply each step at its time; returns how many rlogd refused (they are reported, and the
    schedule goes on: a killed broker may still be restarting when its pause comes). Setting
    `stop` ends it early, leaving the healing to the caller."""
    refused = 0
    started = time.monotonic()
    stop = stop or threading.Event()
    for step in steps:
        wait_s = step.at_s - (time.monotonic() - started)
        if wait_s > 0 and stop.wait(wait_s):
            break
        reply = apply(step.request)
        if reply.get("ok"):
            report(f"{step.describe()}: {reply.get('message', 'done')}")
        else:
            refused += 1
            report(f"{step.describe()}: refused: {reply.get('error')}")
    return refused
