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
from dataclasses import dataclass, field
from pathlib import Path


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
