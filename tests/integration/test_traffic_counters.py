"""A broker counts its clients' traffic (records and bytes in and out) for rlog tui."""

from __future__ import annotations

import json
import time

import pytest

from support import clients
from support.clients import Message

pytestmark = pytest.mark.integration


def test_traffic_json_counts_records_produced_and_fetched_by_consumers(cluster) -> None:
    clients.create_topic(cluster.bootstrap, "metered", partitions=2)
    messages = [Message(None, b"x" * 100, (), i % 2, -1) for i in range(500)]
    clients.confluent_produce(cluster.bootstrap, "metered", messages)
    read = clients.confluent_consume(cluster.bootstrap, "metered", [0, 1], 500)
    assert len(read) == 500

    path = cluster.data_dir / "broker-1" / "traffic.json"
    deadline = time.monotonic() + 5
    counters: dict = {}
    while time.monotonic() < deadline:  # rewritten every second
        counters = json.loads(path.read_text()) if path.exists() else {}
        if counters.get("records_out", 0) >= 500:
            break
        time.sleep(0.2)
    assert counters["records_in"] == 500
    assert counters["records_out"] == 500  # each offset handed to the consumer once
    assert counters["bytes_in"] > 500 * 100 and counters["bytes_out"] > 500 * 100
    # Requests per API, as Kafka's RequestsPerSec{request=...}: the produce and the fetches
    # above, and the metadata and version questions before them.
    by_api = counters["requests_by_api"]
    assert by_api["PRODUCE"] >= 1 and by_api["FETCH"] >= 1 and by_api["API_VERSIONS"] >= 2
    assert sum(by_api.values()) == counters["requests"]
