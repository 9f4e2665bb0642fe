"""Watch one config file for edits with watchdog (inotify on Linux), whatever way the editor
saves it: in place, or a new file renamed over the old one."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from watchdog.events import FileSystemEvent, FileSystemEventHandler
from watchdog.observers import Observer


class _Handler(FileSystemEventHandler):
    def __init__(self, path: Path, edited: Callable[[], None]) -> None:
        self._path = os.path.realpath(path)
        self._edited = edited

    def on_any_event(self, event: FileSystemEvent) -> None:
        if event.event_type in ("opened", "closed_no_write"):
            return  # reads, including rlogd's own
        paths = {event.src_path, getattr(event, "dest_path", "") or ""}
        if any(p and os.path.realpath(p) == self._path for p in paths):
            self._edited()


class ConfigWatcher:
    """Calls `edited()` (on watchdog's thread) after each change of `path`."""

    def __init__(self, path: Path, edited: Callable[[], None]) -> None:
        self._observer = Observer()
        directory = os.path.dirname(os.path.realpath(path))
        self._observer.schedule(_Handler(path, edited), directory, recursive=False)

    def start(self) -> None:
        self._observer.start()

    def stop(self) -> None:
        self._observer.stop()
        self._observer.join(timeout=5)
