"""Failures handled as fast as rlogd sees them: a killed broker is fenced when its process exits,
not when its session expires; a stopped cluster comes back without waiting out sessions; a
broker that comes back gets its preferred leaderships back within seconds.

The session timeout here is a minute, so anything that happens within seconds happened because
rlogd told the controller, not because a session expired.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from support.cluster import Cluster
from support.replication import CONFIG, every_broker, partition_state, wait_for

pytestmark = pytest.mark.integration

SESSION_MS = 60_000
SLOW_SESSIONS = CONFIG.replace(
    '"broker.session.timeout.ms" = 3000', f'"broker.session.timeout.ms" = {SESSION_MS}'
).replace('"auto.leader.rebalance.enable" = false', '"auto.leader.rebalance.enable" = true')
assert f"= {SESSION_MS}" in SLOW_SESSIONS and 'rebalance.enable" = true' in SLOW_SESSIONS
# Well inside the session: only rlogd's notice (or a clean shutdown) can explain it.
FAST_S = 20.0
PARTITIONS = 6


def create_topic(cluster: Cluster, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = NewTopic(name, num_partitions=PARTITIONS, replication_factor=3)
    admin.create_topics([topic])[name].result(timeout=15)
    wait_for(f"{name} to be led everywhere", lambda: all_led(cluster, name))


def states(cluster: Cluster, topic: str) -> list[dict]:
    return [partition_state(cluster, topic, p) for p in range(PARTITIONS)]


def all_led(cluster: Cluster, topic: str) -> bool:
    return all(s["leader"] >= 0 for s in states(cluster, topic))


def preferred_everywhere(cluster: Cluster, topic: str) -> bool:
    return all(
        s["leader"] == s["replicas"][0] and len(s["isr"]) == 3 for s in states(cluster, topic)
    )


def produce_everywhere(cluster: Cluster, topic: str) -> None:
    """One acks=all record to every partition, each acknowledged."""
    producer = Producer(
        {"bootstrap.servers": every_broker(cluster), "acks": "all", "message.timeout.ms": 15000}
    )
    errors: list[object] = []
    for partition in range(PARTITIONS):
        producer.produce(
            topic, b"x", partition=partition, on_delivery=lambda e, _: errors.append(e)
        )
    assert producer.flush(20) == 0
    assert errors == [None] * PARTITIONS, errors


def test_a_killed_leader_is_fenced_when_its_process_exits(cluster_factory) -> None:
    cluster = cluster_factory(brokers=3, config_text=SLOW_SESSIONS)
    topic = f"fast-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic)
    wait_for("preferred leaders", lambda: preferred_everywhere(cluster, topic))
    victim = partition_state(cluster, topic, 0)["leader"]
    led = [p for p, s in enumerate(states(cluster, topic)) if s["leader"] == victim]
    killed_at = time.monotonic()
    cluster.chaos("kill", f"broker-{victim}")

    def moved() -> bool:
        now = states(cluster, topic)
        return all(now[p]["leader"] not in (victim, -1) for p in led)

    wait_for(f"broker {victim}'s leaderships to move", moved, timeout_s=FAST_S, every_s=0.05)
    assert time.monotonic() - killed_at < SESSION_MS / 1000 / 3
    produce_everywhere(cluster, topic)
    # The restarted process registered without waiting out its predecessor's session, caught
    # up, rejoined every ISR and, by the automatic preferred-leader check, leads again.
    wait_for(
        f"broker {victim} to lead its preferred partitions again",
        lambda: preferred_everywhere(cluster, topic),
        timeout_s=FAST_S,
    )


def test_a_paused_broker_is_still_fenced_by_its_session(cluster_factory) -> None:
    """A stopped process is alive to rlogd: no notice; the heartbeat timeout decides, as Kafka."""
    config = CONFIG.replace(
        '"broker.session.timeout.ms" = 3000', '"broker.session.timeout.ms" = 4000'
    )
    cluster = cluster_factory(brokers=3, config_text=config)
    topic = f"paused-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic)
    victim = partition_state(cluster, topic, 0)["leader"]
    other = next(b for b in (1, 2, 3) if b != victim)  # a paused broker answers nothing
    cluster.chaos("pause", f"broker-{victim}")
    try:
        time.sleep(1.5)
        assert partition_state(cluster, topic, 0, via=other)["leader"] == victim  # in session
        wait_for(
            f"paused broker {victim} to lose partition 0 once its session expires",
            lambda: partition_state(cluster, topic, 0, via=other)["leader"] not in (victim, -1),
            timeout_s=FAST_S,
        )
    finally:
        cluster.chaos("resume", f"broker-{victim}")


def test_a_stopped_cluster_serves_again_without_waiting_out_sessions(cluster_factory) -> None:
    cluster = cluster_factory(brokers=3, config_text=SLOW_SESSIONS, name="restarted")
    topic = f"restart-{uuid.uuid4().hex[:6]}"
    create_topic(cluster, topic)
    produce_everywhere(cluster, topic)
    assert cluster.stop() == 0
    started_at = time.monotonic()
    again = cluster_factory(brokers=3, config_text=SLOW_SESSIONS, name="restarted")
    wait_for("every partition led again", lambda: all_led(again, topic), timeout_s=FAST_S)
    produce_everywhere(again, topic)
    assert time.monotonic() - started_at < SESSION_MS / 1000 / 2
    # After a clean stop the last broker to go led everything; each gets its own back.
    wait_for(
        "every partition led by its preferred replica",
        lambda: preferred_everywhere(again, topic),
        timeout_s=FAST_S,
    )
