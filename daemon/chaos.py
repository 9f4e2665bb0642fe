"""Network and disk chaos as rlogd keeps it: which links are cut, which broker is slow, whose
disk is full or stalled, which broker loses its next answers to clients' Produce requests.

rlogd owns these rules and writes each broker's share to the broker's faults file
(`DIR/broker-N/faults.json`, its shape in daemon/faults_file.py, read by
daemon/broker/faults.py), then signals the broker with
SIGUSR1 to reread it. A broker restarted while a link is cut reads the file at start, so the
partition outlives the process, as a real one would. A new rlogd starts with every link healed.

Links are cut on both sides: `partition broker-1 broker-2` makes each refuse the other's
requests and fail its own to the other. With the controller among the names, the brokers named
lose their link to it (only brokers connect to the controller). `clients` also cuts Kafka
clients off the first broker named.

`lose_answers(broker, count)` is an order, not a state: every request arms `count` fresh
losses in the broker, even one repeating the last count (each carries a new request number),
and a count of 0 disarms. rlogd does not learn when the broker has used them up, so the rule
stays in its summary until heal or a count of 0; a broker restarted meanwhile reads it and
loses that many answers again.
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from pathlib import Path
from typing import Any

from rlog.daemon.data_dir import CONTROLLER, faults_path
from rlog.daemon.faults_file import CLIENTS, DISK_STATES, LOSE_ANSWERS_MAX, FaultRules

DELAY_MS_MAX = 60_000


class ChaosError(ValueError):
    """A chaos request that cannot be applied; the message says why in one line."""


class ChaosRules:
    def __init__(self, broker_dirs: dict[str, Path]) -> None:
        """`broker_dirs`: broker name -> its data dir, where its faults file goes."""
        self.broker_dirs = broker_dirs
        self.faults = {name: FaultRules() for name in broker_dirs}
        # Numbers lose-answers requests; never reset, so no two requests share one.
        self._lose_answers_requests = 0

    def faults_path(self, broker: str) -> Path:
        return faults_path(self.broker_dirs[broker])

    def summary(self) -> dict[str, dict[str, Any]]:
        """Every broker that has a fault, and its rules."""
        return {n: f.to_dict() for n, f in self.faults.items() if not f.healthy}

    # ---- changes: each returns the brokers whose rules changed ----

    def partition(self, names: list[str], clients: bool) -> list[str]:
        if len(set(names)) < 2:
            raise ChaosError("partition needs two or more different processes")
        brokers = [n for n in names if n != CONTROLLER]
        self._check_brokers(brokers)
        if clients and names[0] == CONTROLLER:  # refused before any cut is recorded
            raise ChaosError("--clients cuts clients off the first name: make it a broker")
        before = self._snapshot()
        for a, b in itertools.combinations(brokers, 2):
            self._cut(a, b)
            self._cut(b, a)
        if CONTROLLER in names:
            for broker in brokers:
                self._cut(broker, CONTROLLER)
        if clients:
            self._cut(names[0], CLIENTS)
        return self._changed(before)

    def heal(self) -> list[str]:
        before = self._snapshot()
        self.faults = {name: FaultRules() for name in self.broker_dirs}
        return self._changed(before)

    def delay(self, broker: str, delay_ms: int) -> list[str]:
        self._check_brokers([broker])
        if not 0 <= delay_ms <= DELAY_MS_MAX:
            raise ChaosError(f"delay must be within 0..{DELAY_MS_MAX} ms, not {delay_ms}")
        before = self._snapshot()
        self.faults[broker] = replace(self.faults[broker], delay_ms=delay_ms)
        return self._changed(before)

    def disk(self, broker: str, state: str) -> list[str]:
        self._check_brokers([broker])
        if state not in DISK_STATES:
            raise ChaosError(f"disk state must be one of {', '.join(DISK_STATES)}, not {state!r}")
        before = self._snapshot()
        self.faults[broker] = replace(self.faults[broker], disk=state)
        return self._changed(before)

    def lose_answers(self, broker: str, count: int) -> list[str]:
        """The broker drops its next `count` answers to clients' Produce requests after the
        append (0: none)."""
        if broker == CONTROLLER:  # a known process, but one no client produces to
            raise ChaosError("lose-answers acts on a broker (broker-N), not the controller")
        self._check_brokers([broker])
        # bool is an int to Python, but `true` is no count.
        if isinstance(count, bool) or not 0 <= count <= LOSE_ANSWERS_MAX:
            raise ChaosError(f"count must be within 0..{LOSE_ANSWERS_MAX}, not {count}")
        before = self._snapshot()
        request = 0
        if count:
            self._lose_answers_requests += 1
            request = self._lose_answers_requests
        self.faults[broker] = replace(
            self.faults[broker], lose_answers=count, lose_answers_request=request
        )
        return self._changed(before)

    # ---- files ----

    def write(self, broker: str) -> None:
        """The broker's faults file, replaced atomically (the broker may read it any time)."""
        self.faults[broker].write(self.faults_path(broker))

    def write_all(self) -> None:
        for broker in self.faults:
            self.write(broker)

    def _check_brokers(self, names: list[str]) -> None:
        unknown = [n for n in names if n not in self.faults]
        if unknown:
            known = ", ".join([*self.faults, CONTROLLER])
            raise ChaosError(f"unknown process {unknown[0]!r} (known: {known})")

    def _cut(self, broker: str, peer: str) -> None:
        rules = self.faults[broker]
        self.faults[broker] = replace(rules, cut=rules.cut | {peer})

    def _snapshot(self) -> dict[str, FaultRules]:
        return dict(self.faults)

    def _changed(self, before: dict[str, FaultRules]) -> list[str]:
        return [n for n, rules in self.faults.items() if rules != before[n]]
