"""kill -9 during a produce stream: every acknowledged record survives, once, in order."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from confluent_kafka import KafkaError, Producer

from support import clients

pytestmark = pytest.mark.integration

FLUSH_EVERY_MESSAGE = """
[cluster]
restart_backoff_ms = 200

[broker]
"log.flush.interval.messages" = 1
"log.segment.bytes" = 65536
"""


def test_kill_minus_nine_mid_stream_loses_no_acknowledged_record(cluster_factory) -> None:
    cluster = cluster_factory(config_text=FLUSH_EVERY_MESSAGE)
    clients.create_topic(cluster.bootstrap, "crash")
    acknowledged: list[int] = []
    failed: list[int] = []
    lock = threading.Lock()

    def delivered(error: KafkaError | None, message) -> None:
        number = int(message.value())
        with lock:
            (failed if error is not None else acknowledged).append(number)

    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "enable.idempotence": True,  # retries after the crash must not duplicate
            "linger.ms": 1,
            "message.timeout.ms": 60_000,
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 200,
        }
    )
    number = 0

    def produce_for(seconds: float) -> None:
        nonlocal number
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            try:
                producer.produce("crash", value=str(number).encode(), partition=0,
                                 on_delivery=delivered)  # fmt: skip
                number += 1
            except BufferError:
                pass
            producer.poll(0.001)

    produce_for(1.5)
    victim = cluster.broker_pid(1)
    assert victim is not None
    with lock:
        acked_before_kill = len(acknowledged)
    os.kill(victim, signal.SIGKILL)  # a pid we started, through rlogd
    produce_for(1.0)  # keeps producing while the broker is down and restarting
    cluster.wait_until_running(not_pid=victim)
    produce_for(1.0)
    assert producer.flush(60) == 0

    assert acked_before_kill > 100, "the stream should have been running before the kill"
    assert not failed, f"{len(failed)} deliveries failed, e.g. {failed[:5]}"
    read = clients.confluent_consume(cluster.bootstrap, "crash", [0], len(acknowledged))
    values = [int(m.value) for m in read]
    # Every acknowledged record is there, exactly once, and in the order it was produced.
    assert sorted(acknowledged) == list(range(number))
    assert values == list(range(number))
    assert [m.offset for m in read] == list(range(len(read)))
    # The restarted broker said it had crashed (no clean-shutdown file), so as the last ISR
    # member of its leaderless partition it led again only through recovery (KIP-966).
    journal = (cluster.data_dir / "events" / "controller.jsonl").read_text()
    assert "partition crash-0: recovering" in journal
    assert "recovered: broker 1 has the longest log" in journal
