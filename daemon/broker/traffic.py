"""The broker core's traffic counters (core/broker/traffic.py) as a file: the broker writes
them to `traffic.json` in its data dir every second (replaced atomically), for `rlog tui` to
turn into rates.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rlog.core.broker import TrafficCounters
from rlog.core.protocol.apis import ApiKey
from rlog.daemon.data_dir import traffic_path


def write_traffic(
    counters: TrafficCounters,
    data_dir: Path,
    requests: int,
    requests_by_api: Mapping[int, int] | None = None,
) -> None:
    """Replace `traffic.json`: readers see the old or the new counters, never half.
    `requests`: every request the listener read since start, clients' and peers';
    `requests_by_api`: the same per API key, written under Kafka's API names."""
    document = {"ts": time.time(), "pid": os.getpid(), **asdict(counters), "requests": requests}
    if requests_by_api is not None:
        document["requests_by_api"] = {_api_name(key): n for key, n in requests_by_api.items()}
    path = traffic_path(data_dir)
    scratch = path.with_suffix(".json.tmp")
    try:
        scratch.write_text(json.dumps(document))
        os.replace(scratch, path)
    except OSError:
        pass  # a full disk: the counters are a view, the broker goes on


def _api_name(api_key: int) -> str:
    try:
        return ApiKey(api_key).name
    except ValueError:
        return str(api_key)


def read_traffic(broker_dir: Path) -> dict[str, Any] | None:
    """A broker's last written counters, or None (not running yet, or unreadable)."""
    try:
        document = json.loads(traffic_path(broker_dir).read_text())
    except (OSError, ValueError):
        return None
    return document if isinstance(document, dict) else None
