"""The examples/pipeline.py job survives a SIGKILLed partition leader: its counts changelog ends
equal to a batch recomputation from the input (no event lost or counted twice)."""

from __future__ import annotations

import importlib.util
import threading
import time
from pathlib import Path
from types import ModuleType

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.integration

CONFIG = """
[broker]
"default.replication.factor" = 3
"min.insync.replicas" = 2
"broker.session.timeout.ms" = 3000
"broker.heartbeat.interval.ms" = 500
"replica.lag.time.max.ms" = 3000
"replica.fetch.backoff.ms" = 100
"""


def load_pipeline() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "examples" / "pipeline.py"
    spec = importlib.util.spec_from_file_location("rlog_example_pipeline", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def create_topics(bootstrap: str, partitions: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=n, replication_factor=3) for name, n in partitions.items()]
    )
    for future in futures.values():
        future.result(timeout=30)


def partition_leader(bootstrap: str, topic: str, partition: int) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return metadata.topics[topic].partitions[partition].leader


def wait_for_offsets(query, topic: str, total: int, timeout_s: float) -> None:
    """Until the query's committed source offsets cover `total` records."""
    import json

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert query.exception() is None, query.exception()
        progress = query.lastProgress
        if progress and progress["sources"]:
            # The progress's own JSON: PySpark 4.0's `sources[0]["endOffset"]` is str() of the
            # parsed offsets (single quotes), not their JSON.
            end = json.loads(progress.json)["sources"][0]["endOffset"]
            if sum(end.get(topic, {}).values()) >= total:
                return
        time.sleep(0.5)
    raise AssertionError(f"query did not reach {total} records in {timeout_s} s")


def test_pipeline_survives_leader_kill(spark, cluster_factory, tmp_path) -> None:
    pipeline = load_pipeline()
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    bootstrap = cluster.bootstrap
    create_topics(bootstrap, {"events": 3, "counts": 2})
    started = time.monotonic()

    pipeline.produce_events(bootstrap, "events", pipeline.generate_events(2000, seed=1))
    query = pipeline.build_query(
        spark, bootstrap, str(tmp_path / "checkpoint"),
        processing_time="1 second", max_offsets_per_trigger=500,
    )  # fmt: skip
    try:
        # Let the job get going, then kill the leader of events/0 while batches are in flight.
        # The first batch includes the query's start, which took over 60 s once on a loaded
        # 2-core machine: the bound is for a hung query, not a slow one.
        wait_for_offsets(query, "events", 500, 120)
        victim = partition_leader(bootstrap, "events", 0)
        cluster.chaos("kill", f"broker-{victim}")
        # Produce more while the broker is down, in the background so batches keep running.
        producer = threading.Thread(
            target=pipeline.produce_events,
            args=(bootstrap, "events", pipeline.generate_events(1500, seed=2)),
        )
        producer.start()
        producer.join(60)
        assert not producer.is_alive()
        cluster.chaos("restart", f"broker-{victim}")
        pipeline.produce_events(bootstrap, "events", pipeline.generate_events(500, seed=3))
        wait_for_offsets(query, "events", 4000, 90)
        assert query.exception() is None, query.exception()
    finally:
        query.stop()

    expected = pipeline.batch_counts(spark, bootstrap)
    assert sum(expected.values()) == 4000  # the input itself is complete and unduplicated
    got = pipeline.latest_counts(spark, bootstrap)
    assert got == expected
    print(f"pipeline failover test took {time.monotonic() - started:.1f} s")
