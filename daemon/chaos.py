"""Network and disk chaos as rlogd keeps it: which links are cut, which broker is slow, whose
disk is full or stalled.

rlogd owns these rules and writes each broker's share to the broker's faults file
(`DIR/broker-N/faults.json`, read by daemon/broker/faults.py), then signals the broker with
SIGUSR1 to reread it. A broker restarted while a link is cut reads the file at start, so the
partition outlives the process, as a real one would. A new rlogd starts with every link healed.

Links are cut on both sides: `partition broker-1 broker-2` makes each refuse the other's
requests and fail its own to the other. With the controller among the names, the brokers named
lose their link to it (only brokers connect to the controller). `clients` also cuts Kafka
clients off the first broker named.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

CONTROLLER = "controller"
CLIENTS = "clients"
DISK_STATES = ("ok", "full", "stall")
FAULTS_FILE = "faults.json"
DELAY_MS_MAX = 60_000


class ChaosError(ValueError):
    """A chaos request that cannot be applied; the message says why in one line."""


@dataclass
class BrokerFaults:
    cut: set[str] = field(default_factory=set)
    delay_ms: int = 0
    disk: str = "ok"

    def document(self) -> dict[str, Any]:
        return {"cut": sorted(self.cut), "delay_ms": self.delay_ms, "disk": self.disk}

    @property
    def healthy(self) -> bool:
        return not self.cut and not self.delay_ms and self.disk == "ok"


class ChaosRules:
    def __init__(self, broker_dirs: dict[str, Path]) -> None:
        """`broker_dirs`: broker name -> its data dir, where its faults file goes."""
        self.broker_dirs = broker_dirs
        self.faults = {name: BrokerFaults() for name in broker_dirs}

    def faults_path(self, broker: str) -> Path:
        return self.broker_dirs[broker] / FAULTS_FILE

    def summary(self) -> dict[str, dict[str, Any]]:
        """Every broker that has a fault, and its rules."""
        return {n: f.document() for n, f in self.faults.items() if not f.healthy}

    # ---- changes: each returns the brokers whose rules changed ----

    def partition(self, names: list[str], clients: bool) -> list[str]:
        if len(set(names)) < 2:
            raise ChaosError("partition needs two or more different processes")
        brokers = [n for n in names if n != CONTROLLER]
        self._check_brokers(brokers)
        before = self._snapshot()
        for a, b in itertools.combinations(brokers, 2):
            self.faults[a].cut.add(b)
            self.faults[b].cut.add(a)
        if CONTROLLER in names:
            for broker in brokers:
                self.faults[broker].cut.add(CONTROLLER)
        if clients:
            if names[0] == CONTROLLER:
                raise ChaosError("--clients cuts clients off the first name: make it a broker")
            self.faults[names[0]].cut.add(CLIENTS)
        return self._changed(before)

    def heal(self) -> list[str]:
        before = self._snapshot()
        self.faults = {name: BrokerFaults() for name in self.broker_dirs}
        return self._changed(before)

    def delay(self, broker: str, delay_ms: int) -> list[str]:
        self._check_brokers([broker])
        if not 0 <= delay_ms <= DELAY_MS_MAX:
            raise ChaosError(f"delay must be within 0..{DELAY_MS_MAX} ms, not {delay_ms}")
        before = self._snapshot()
        self.faults[broker].delay_ms = delay_ms
        return self._changed(before)

    def disk(self, broker: str, state: str) -> list[str]:
        self._check_brokers([broker])
        if state not in DISK_STATES:
            raise ChaosError(f"disk state must be one of {', '.join(DISK_STATES)}, not {state!r}")
        before = self._snapshot()
        self.faults[broker].disk = state
        return self._changed(before)

    # ---- files ----

    def write(self, broker: str) -> None:
        """The broker's faults file, replaced atomically (the broker may read it any time)."""
        path = self.faults_path(broker)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(json.dumps(self.faults[broker].document()) + "\n")
        os.replace(temporary, path)

    def write_all(self) -> None:
        for broker in self.faults:
            self.write(broker)

    def _check_brokers(self, names: list[str]) -> None:
        unknown = [n for n in names if n not in self.faults]
        if unknown:
            known = ", ".join([*self.faults, CONTROLLER])
            raise ChaosError(f"unknown process {unknown[0]!r} (known: {known})")

    def _snapshot(self) -> dict[str, dict[str, Any]]:
        return {name: faults.document() for name, faults in self.faults.items()}

    def _changed(self, before: dict[str, dict[str, Any]]) -> list[str]:
        return [n for n, faults in self.faults.items() if faults.document() != before[n]]
