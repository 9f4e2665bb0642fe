"""The topics one broker knows, kept in `topics.json` in its data dir.

Until the controller's metadata log lands, a broker is its own cluster and this small file is its
metadata: topic name → partition count and per-topic config overrides. It is replaced atomically
(write, fsync, rename, fsync dir) and written *before* partition logs are created and *after*
they are deleted, so a crash in between leaves only a harmless orphan directory or a topic whose
missing logs are created again at start.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

TOPIC_NAME_MAX_LENGTH = 249
_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")


def topic_name_problem(name: str) -> str | None:
    """Why a topic name is illegal under Kafka's rules, or None when it is fine."""
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > TOPIC_NAME_MAX_LENGTH:
        return f"topic name is longer than {TOPIC_NAME_MAX_LENGTH} characters"
    if not _LEGAL_TOPIC.fullmatch(name):
        return f"topic name {name!r} has characters other than ASCII letters, digits, '.', '_', '-'"
    return None


@dataclass
class TopicInfo:
    name: str
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)


class TopicStore:
    def __init__(self, data_dir: Path) -> None:
        self._path = data_dir / "topics.json"
        self.topics: dict[str, TopicInfo] = {}
        if self._path.exists():
            document = json.loads(self._path.read_text())
            for name, entry in document["topics"].items():
                self.topics[name] = TopicInfo(name, entry["partitions"], entry.get("configs", {}))

    def put(self, topic: TopicInfo) -> None:
        self.topics[topic.name] = topic
        self._save()

    def remove(self, name: str) -> None:
        del self.topics[name]
        self._save()

    def _save(self) -> None:
        document = {
            "topics": {
                t.name: {"partitions": t.partitions, "configs": t.configs}
                for t in self.topics.values()
            }
        }
        temporary = self._path.with_suffix(".json.tmp")
        with open(temporary, "w") as handle:
            json.dump(document, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self._path)
        directory = os.open(self._path.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)
