"""Replication with real processes (issue 4, point 10): three brokers and a controller under
rlogd, RF=3, min.insync.replicas=2, acks=all, and brokers killed, paused and stopped on purpose.

What a user relies on: every record acknowledged with acks=all is read back after the leader is
SIGKILLed and another replica paused; with one replica alive acks=all is refused with
NOT_ENOUGH_REPLICAS; and with unclean election on, a stale replica may lead and the records only
the dead ISR had are lost, exactly as Kafka documents. The test prints which.
"""

from __future__ import annotations

import time
import uuid

from confluent_kafka import KafkaError, Producer

from support.replication import (
    CONFIG,
    NumberedProducer,
    create_replicated_topic,
    log_end_offsets,
    partition_state,
    read_numbers,
    wait_for,
)

# ---- the tests ----


def test_acked_records_survive_a_killed_leader_and_a_paused_follower(cluster_factory) -> None:
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    topic = f"numbers-{uuid.uuid4().hex[:6]}"
    create_replicated_topic(cluster, topic)
    producer = NumberedProducer(cluster, topic, **{"enable.idempotence": True}).start()
    try:
        producer.wait_for_acks(500)
        before = partition_state(cluster, topic)
        assert before["isr"] == [1, 2, 3]
        killed = before["leader"]
        cluster.chaos("kill", f"broker-{killed}")
        after = wait_for(
            "a new leader",
            lambda: (s := partition_state(cluster, topic))["leader"] not in (-1, killed) and s,
        )
        assert after["leader_epoch"] > before["leader_epoch"]
        producer.wait_for_acks(500)
        paused = next(b for b in (1, 2, 3) if b not in (killed, after["leader"]))
        cluster.chaos("pause", f"broker-{paused}")
        time.sleep(4)  # past replica.lag.time.max.ms and the session timeout
        cluster.chaos("resume", f"broker-{paused}")
        wait_for(
            "the ISR to be full again",
            lambda: partition_state(cluster, topic)["isr"] == [1, 2, 3],
            timeout_s=60,
        )
        producer.wait_for_acks(500)
    finally:
        producer.stop()
    assert not producer.failed, producer.failed[:10]
    numbers = read_numbers(cluster, topic, len(producer.acked))
    missing = sorted(set(producer.acked) - set(numbers))
    assert not missing, f"{len(missing)} acknowledged records lost: {missing[:20]}"
    assert len(numbers) == len(set(numbers)), "the idempotent producer's retries duplicated"
    assert numbers == sorted(numbers), "records out of order"


def test_acks_all_is_refused_with_one_replica_alive(cluster_factory) -> None:
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    topic = f"lonely-{uuid.uuid4().hex[:6]}"
    create_replicated_topic(cluster, topic)
    leader = partition_state(cluster, topic)["leader"]
    for follower in (b for b in (1, 2, 3) if b != leader):
        cluster.chaos("terminate", f"broker-{follower}")
    wait_for(
        "the ISR to shrink to the leader",
        lambda: partition_state(cluster, topic)["isr"] == [leader],
    )
    errors: list[KafkaError | None] = []
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "retries": 0, "linger.ms": 0}
    )
    producer.produce(topic, value=b"x", on_delivery=lambda error, _: errors.append(error))
    assert producer.flush(15) == 0
    assert [e.code() if e else None for e in errors] == [KafkaError.NOT_ENOUGH_REPLICAS]
    # acks=1 still works: the leader alone is enough for it.
    acks_one = Producer({"bootstrap.servers": cluster.bootstrap, "acks": 1, "retries": 0})
    acks_one.produce(topic, value=b"y", on_delivery=lambda error, _: errors.append(error))
    assert acks_one.flush(15) == 0
    assert errors[-1] is None


def test_unclean_election_makes_a_stale_replica_leader_and_loses_records(cluster_factory) -> None:
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    topic = f"unclean-{uuid.uuid4().hex[:6]}"
    create_replicated_topic(
        cluster, topic, {"min.insync.replicas": "1", "unclean.leader.election.enable": "true"}
    )
    state = partition_state(cluster, topic)
    leader = state["leader"]
    stale, third = (b for b in (1, 2, 3) if b != leader)
    first = NumberedProducer(cluster, topic).start()
    first.wait_for_acks(200)
    first.stop()
    # The stale replica stops; everything after this is acknowledged by the others only.
    cluster.chaos("terminate", f"broker-{stale}")
    wait_for("the ISR to drop it", lambda: stale not in partition_state(cluster, topic)["isr"])
    second = NumberedProducer(cluster, topic)
    second.sent = 1_000_000
    second.start()
    second.wait_for_acks(200)
    second.stop()
    # The whole ISR dies (no broker is left to answer Metadata); only the stale replica returns.
    cluster.chaos("terminate", f"broker-{third}")
    cluster.chaos("terminate", f"broker-{leader}")
    wait_for(
        "the ISR's brokers to stop",
        lambda: all(cluster.status()["brokers"][b - 1]["pid"] is None for b in (third, leader)),
    )
    cluster.chaos("restart", f"broker-{stale}")
    wait_for(
        "the stale replica to lead",
        lambda: partition_state(cluster, topic)["leader"] == stale,
        timeout_s=60,
    )
    acked = set(first.acked) | set(second.acked)
    numbers = set(read_numbers(cluster, topic, len(first.acked)))
    lost = sorted(acked - numbers)
    print(f"unclean election: {len(lost)} of {len(acked)} acknowledged records lost: "
          f"{lost[:5]}...{lost[-5:]}")  # fmt: skip
    assert set(first.acked) <= numbers, "records the stale replica had must survive"
    assert lost == sorted(second.acked), "exactly the records only the old ISR had are lost"
    # The old ISR returns: it truncates to the new leader's log and rejoins.
    cluster.chaos("restart", f"broker-{leader}")
    cluster.chaos("restart", f"broker-{third}")
    wait_for(
        "the ISR to be full again",
        lambda: partition_state(cluster, topic)["isr"] == [1, 2, 3],
        timeout_s=60,
    )
    leos = log_end_offsets(cluster, topic)
    assert set(leos.values()) == {len(first.acked)}, f"the old ISR kept its divergent tail: {leos}"


def test_a_killed_controller_stops_nothing_and_fails_over_again_once_back(cluster_factory) -> None:
    """Brokers keep serving (and acks=all keeps completing) while the controller is down, as
    long as no ISR has to change; the restarted controller replays its log and elects again."""
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    topic = f"headless-{uuid.uuid4().hex[:6]}"
    create_replicated_topic(cluster, topic)
    producer = NumberedProducer(cluster, topic, **{"enable.idempotence": True}).start()
    try:
        producer.wait_for_acks(200)
        old_pid = cluster.controller_pid()
        cluster.chaos("kill", "controller")
        producer.wait_for_acks(200)  # no controller needed for this
        wait_for(
            "rlogd to restart the controller",
            lambda: cluster.controller_pid() not in (None, old_pid),
        )
        before = partition_state(cluster, topic)
        cluster.chaos("kill", f"broker-{before['leader']}")
        wait_for(
            "a new leader from the restarted controller",
            lambda: partition_state(cluster, topic)["leader_epoch"] > before["leader_epoch"],
        )
        producer.wait_for_acks(200)
    finally:
        producer.stop()
    assert not producer.failed, producer.failed[:10]
    numbers = read_numbers(cluster, topic, len(producer.acked))
    assert not set(producer.acked) - set(numbers), "acknowledged records lost"


def test_leadership_returns_to_the_preferred_replica_by_itself(cluster_factory) -> None:
    config = CONFIG.replace(
        '"auto.leader.rebalance.enable" = false',
        '"auto.leader.rebalance.enable" = true\n"leader.imbalance.check.interval.seconds" = 1',
    )
    cluster = cluster_factory(brokers=3, config_text=config)
    topic = f"preferred-{uuid.uuid4().hex[:6]}"
    create_replicated_topic(cluster, topic)
    before = partition_state(cluster, topic)
    preferred = before["replicas"][0]
    cluster.chaos("kill", f"broker-{preferred}")
    # Another replica leads (one epoch), then the preferred one again (a second epoch). The
    # first may last only as long as the restarted broker takes to catch up, well under a
    # poll's interval, so the epochs tell it rather than a sighting of the other leader.
    wait_for(
        "the preferred replica to lead again, two leader epochs later",
        lambda: (
            (state := partition_state(cluster, topic))["leader"] == preferred
            and state["leader_epoch"] >= before["leader_epoch"] + 2
        ),
        timeout_s=60,
    )
