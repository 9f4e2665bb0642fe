"""A broker's faults file: the chaos rules rlogd sets for one broker, as JSON.

rlogd writes it (rlog.daemon.chaos) and the broker reads it (rlog.daemon.broker.faults), so its
shape is defined here, once::

    {"cut": ["broker-2", "controller", "clients"], "delay_ms": 0, "disk": "ok"}

- ``cut``: the peers whose links are cut, named as rlogd names processes (``broker-N``,
  ``controller``) plus ``clients`` for everything else (Kafka clients);
- ``delay_ms``: how long every request in and out waits first (0: none);
- ``disk``: one of :data:`DISK_STATES`;
- ``lose_answers``: how many of the next answers to Kafka clients' Produce requests (acks 1 or
  all) the broker drops after the append, closing the connection instead (0: none). The client
  sees its connection drop and retries, which writes the batch again unless it is idempotent;
- ``lose_answers_request``: which lose-answers request set ``lose_answers``. Each request gets a
  new number, so one that repeats the count still arms that many fresh losses in the broker.

A missing key takes its healthy value, and a missing file means no faults; the two
``lose_answers`` keys are written only while answers are to be lost. The file is replaced
atomically, as the broker may read it at any time.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DISK_STATES = ("ok", "full", "stall")
# Losing more answers than this in one go is a typo, not a test: each costs the client a
# reconnect and a retry.
LOSE_ANSWERS_MAX = 10_000
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
    lose_answers: int = 0
    lose_answers_request: int = 0

    @property
    def healthy(self) -> bool:
        return not self.cut and not self.delay_ms and self.disk == "ok" and not self.lose_answers

    def to_dict(self) -> dict[str, Any]:
        document: dict[str, Any] = {
            "cut": sorted(self.cut),
            "delay_ms": self.delay_ms,
            "disk": self.disk,
        }
        # Only while armed (a missing key is its healthy value), so rules without this fault
        # keep the shape they always had, in the files and in rlogd's replies.
        if self.lose_answers:
            document["lose_answers"] = self.lose_answers
            document["lose_answers_request"] = self.lose_answers_request
        return document

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
        lose_answers = document.get("lose_answers", 0)
        lose_answers_request = document.get("lose_answers_request", 0)
        if not isinstance(cut, list) or not all(isinstance(p, str) for p in cut):
            raise FaultsFileError("cut: expected a list of process names")
        # bool is an int to Python, but `true` is no delay.
        if not isinstance(delay_ms, int) or isinstance(delay_ms, bool) or delay_ms < 0:
            raise FaultsFileError("delay_ms: expected a non-negative integer")
        if disk not in DISK_STATES:
            raise FaultsFileError(f"disk: expected one of {', '.join(DISK_STATES)}")
        if not _is_count(lose_answers) or lose_answers > LOSE_ANSWERS_MAX:
            raise FaultsFileError(f"lose_answers: expected an integer within 0..{LOSE_ANSWERS_MAX}")
        if not _is_count(lose_answers_request):
            raise FaultsFileError("lose_answers_request: expected a non-negative integer")
        if not lose_answers:
            lose_answers_request = 0  # means nothing unarmed, and to_dict leaves it out
        return cls(frozenset(cut), delay_ms, disk, lose_answers, lose_answers_request)

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
        if self.lose_answers:
            answers = "answer" if self.lose_answers == 1 else "answers"
            parts.append(f"next {self.lose_answers} client Produce {answers} lost")
        return "; ".join(parts) or "no faults"


def _is_count(value: object) -> bool:
    """A non-negative int; bool is an int to Python, but `true` is no count."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
