"""A broker's faults file: the chaos rules rlogd sets for one broker, as JSON.

rlogd writes it (rlog.daemon.chaos) and the broker reads it (rlog.daemon.broker.faults), so its
shape is defined here, once::

    {"cut": ["broker-2", "controller", "clients"], "delay_ms": 0, "disk": "ok"}

- ``cut``: the peers whose links are cut, named as rlogd names processes (``broker-N``,
  ``controller``) plus ``clients`` for everything else (Kafka clients);
- ``delay_ms``: how long every request in and out waits first (0: none);
- ``disk``: one of :data:`DISK_STATES`.

A missing key takes its healthy value, and a missing file means no faults. The file is
replaced atomically, as the broker may read it at any time.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DISK_STATES = ("ok", "full", "stall")
# The peer name for Kafka clients; brokers and the controller go by their process names
# (rlog.daemon.data_dir: broker_name, CONTROLLER).
CLIENTS = "clients"


class FaultsFileError(ValueError):
    """The faults file is unreadable or says something impossible."""


@dataclass(frozen=True)
class FaultRules:
    """One broker's chaos rules; the default is a healthy broker."""

    cut: frozenset[str] = frozenset()
    delay_ms: int = 0
    disk: str = "ok"

    @property
    def healthy(self) -> bool:
        return not self.cut and not self.delay_ms and self.disk == "ok"

    def to_dict(self) -> dict[str, Any]:
        return {"cut": sorted(self.cut), "delay_ms": self.delay_ms, "disk": self.disk}

    def to_json(self) -> str:
        return json.dumps(self.to_dict()) + "\n"

    @classmethod
    def from_json(cls, text: str) -> FaultRules:
        """The rules a faults file's text says; FaultsFileError names the first bad field."""
        try:
            document = json.loads(text)
        except json.JSONDecodeError as error:
            raise FaultsFileError(f"not JSON: {error}") from None
        if not isinstance(document, dict):
            raise FaultsFileError("expected a JSON object")
        cut = document.get("cut", [])
        delay_ms = document.get("delay_ms", 0)
        disk = document.get("disk", "ok")
        if not isinstance(cut, list) or not all(isinstance(p, str) for p in cut):
            raise FaultsFileError("cut: expected a list of process names")
        # bool is an int to Python, but `true` is no delay.
        if not isinstance(delay_ms, int) or isinstance(delay_ms, bool) or delay_ms < 0:
            raise FaultsFileError("delay_ms: expected a non-negative integer")
        if disk not in DISK_STATES:
            raise FaultsFileError(f"disk: expected one of {', '.join(DISK_STATES)}")
        return cls(frozenset(cut), delay_ms, disk)

    @classmethod
    def read(cls, path: Path) -> FaultRules:
        """The rules in the file at ``path``; no file is no faults."""
        try:
            return cls.from_json(path.read_text())
        except FileNotFoundError:
            return cls()
        except OSError as error:
            raise FaultsFileError(f"cannot read {path}: {error.strerror}") from None

    def write(self, path: Path) -> None:
        """Replace the file at ``path`` atomically: a reader sees the old rules or the new."""
        path.parent.mkdir(parents=True, exist_ok=True)  # the broker may not have started yet
        temporary = path.with_name(path.name + ".tmp")
        temporary.write_text(self.to_json())
        os.replace(temporary, path)

    def describe(self) -> str:
        parts = []
        if self.cut:
            parts.append("links cut to " + ", ".join(sorted(self.cut)))
        if self.delay_ms:
            parts.append(f"{self.delay_ms} ms delay")
        if self.disk != "ok":
            parts.append(f"disk {self.disk}")
        return "; ".join(parts) or "no faults"
