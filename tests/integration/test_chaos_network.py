"""Network and disk chaos inside the brokers (rlog chaos partition|heal|delay|disk), with the
checks a Jepsen nemesis run makes: nothing acknowledged with acks=all is lost or duplicated."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.connection import NEED_DATA, ClientConnection
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import build_batch
from rlog.daemon.wire import BlockingKafkaClient
from support.clients import confluent_consume
from support.replication import (
    CONFIG,
    NumberedProducer,
    create_replicated_topic,
    partition_state,
    read_numbers,
    wait_for,
)


def produce_one(bootstrap: str, topic: str, acks: str = "all") -> KafkaError | None:
    errors: list[KafkaError | None] = []
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": acks, "retries": 0, "linger.ms": 0}
    )
    producer.produce(topic, value=b"x", on_delivery=lambda error, _: errors.append(error))
    assert producer.flush(20) == 0
    return errors[0]


def test_an_isolated_leader_loses_no_acknowledged_record(cluster_factory) -> None:
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    topic = f"isolated-{uuid.uuid4().hex[:6]}"
    create_replicated_topic(cluster, topic)
    before = partition_state(cluster, topic)
    leader = before["leader"]
    first, second = (b for b in (1, 2, 3) if b != leader)
    producer = NumberedProducer(
        cluster, topic, **{"enable.idempotence": True, "request.timeout.ms": 3000}
    ).start()
    try:
        producer.wait_for_acks(300)
        # The leader loses the other brokers, the controller and its clients.
        cluster.chaos_request(
            {"op": "partition", "targets": [f"broker-{leader}", f"broker-{first}"], "clients": True}
        )
        cluster.chaos_request(
            {"op": "partition", "targets": [f"broker-{leader}", f"broker-{second}"]}
        )
        cluster.chaos_request({"op": "partition", "targets": [f"broker-{leader}", "controller"]})
        after = wait_for(
            "the majority to elect a new leader",
            lambda: (
                (s := partition_state(cluster, topic, via=first))["leader"] in (first, second) and s
            ),
        )
        assert after["leader_epoch"] > before["leader_epoch"]
        producer.wait_for_acks(300, timeout_s=60)
        cluster.chaos_request({"op": "heal"})
        wait_for(
            "the old leader to rejoin the ISR",
            lambda: partition_state(cluster, topic, via=first)["isr"] == [1, 2, 3],
            timeout_s=60,
        )
    finally:
        producer.stop()
    assert not producer.failed, producer.failed[:10]
    numbers = read_numbers(cluster, topic, len(producer.acked))
    missing = sorted(set(producer.acked) - set(numbers))
    assert not missing, f"{len(missing)} acknowledged records lost: {missing[:20]}"
    assert len(numbers) == len(set(numbers)), "duplicates despite idempotence"


def test_a_full_disk_refuses_produce_but_serves_reads(cluster_factory) -> None:
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    topic = f"full-{uuid.uuid4().hex[:6]}"
    create_replicated_topic(cluster, topic)
    assert produce_one(cluster.bootstrap, topic) is None
    leader = partition_state(cluster, topic)["leader"]
    cluster.chaos_request({"op": "disk", "target": f"broker-{leader}", "state": "full"})
    try:
        error = produce_one(cluster.bootstrap, topic)
        assert error is not None and error.code() == KafkaError.KAFKA_STORAGE_ERROR
        (message,) = confluent_consume(cluster.bootstrap, topic, [0], 1, timeout_s=20)
        assert message.value == b"x", "the acknowledged record is still served"
    finally:
        cluster.chaos_request({"op": "disk", "target": f"broker-{leader}", "state": "ok"})
    assert produce_one(cluster.bootstrap, topic) is None
    assert len(confluent_consume(cluster.bootstrap, topic, [0], 2, timeout_s=20)) == 2


def idempotent_produce(
    codec: ClientConnection, topic: str, producer_id: int, sequence: int
) -> bytes:
    """A Produce frame of one idempotent batch (acks=all), as librdkafka pipelines them."""
    batch = build_batch(
        [(None, b"%d" % sequence)],
        producer_id=producer_id,
        producer_epoch=0,
        base_sequence=sequence,
    )
    body = {
        "transactional_id": None,
        "acks": -1,
        "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": batch}]}],
    }
    return codec.send_request(ApiKey.PRODUCE, 8, body)


def produce_errors(sock: socket.socket, codec: ClientConnection, frames: list[bytes]) -> list[int]:
    """Send `frames` in one write (the broker reads them in one pass); their error codes."""
    sock.sendall(b"".join(frames))
    errors: list[int] = []
    while len(errors) < len(frames):
        event = codec.next_event()
        if event is NEED_DATA:
            chunk = sock.recv(65536)
            assert chunk, "the broker closed the connection instead of answering"
            codec.receive_data(chunk)
            continue
        (partition,) = event.body["responses"][0]["partition_responses"]
        errors.append(partition["error_code"])
    return errors


def test_requests_after_a_failed_write_get_the_storage_error(cluster_factory) -> None:
    """Once a write fails the log dir, every later request of the same read gets
    KAFKA_STORAGE_ERROR, as from Kafka. An idempotent producer's next pipelined batch must not be
    told OUT_OF_ORDER_SEQUENCE_NUMBER (the batch before it was not appended): librdkafka answers
    that by bumping its epoch and sending every unacknowledged record again as new."""
    cluster = cluster_factory(brokers=1)
    topic = f"pipelined-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(15)
    host, port = cluster.bootstrap.split(":")
    with BlockingKafkaClient(host, int(port), timeout_s=10) as client:
        granted = client.request(
            ApiKey.INIT_PRODUCER_ID,
            4,
            {
                "transactional_id": None,
                "transaction_timeout_ms": -1,
                "producer_id": -1,
                "producer_epoch": -1,
            },
        )
    assert granted["error_code"] == 0, granted
    producer_id = granted["producer_id"]
    codec = ClientConnection()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        wait_for(
            "the topic's first batch to be acknowledged",
            lambda: (
                produce_errors(sock, codec, [idempotent_produce(codec, topic, producer_id, 0)])
                == [0]
            ),
        )
        cluster.chaos_request({"op": "disk", "target": "broker-1", "state": "full"})
        try:
            pipelined = [idempotent_produce(codec, topic, producer_id, seq) for seq in (1, 2)]
            errors = produce_errors(sock, codec, pipelined)
        finally:
            cluster.chaos_request({"op": "disk", "target": "broker-1", "state": "ok"})
    storage_error = ErrorCode.KAFKA_STORAGE_ERROR
    assert errors == [storage_error, storage_error], [ErrorCode(e).name for e in errors]


def test_a_chaos_change_while_a_broker_starts_does_not_end_it(cluster_factory) -> None:
    """rlogd signals a broker to reread its rules; one that is still starting (importing, loading
    its logs) must take the change when it can, not die of SIGUSR1's default action."""
    cluster = cluster_factory(brokers=1)
    restarted = cluster.chaos_request({"op": "restart", "target": "broker-1"})  # once spawned
    for delay_ms in (1, 2, 3):
        cluster.chaos_request({"op": "delay", "target": "broker-1", "ms": delay_ms})
    cluster.wait_until_running()
    broker = cluster.status()["brokers"][0]
    assert broker["pid"] == restarted["pid"], broker
    assert produce_one(cluster.bootstrap, "after-start") is None


def test_rules_set_on_a_paused_broker_are_in_force_once_resumed(cluster_factory) -> None:
    """A paused broker cannot reread its rules: the answer says so, and the resume's answer
    comes once they are in force, so the very next request meets them."""
    cluster = cluster_factory(brokers=1)
    topic = f"paused-{uuid.uuid4().hex[:6]}"
    assert produce_one(cluster.bootstrap, topic) is None  # the topic, auto-created
    cluster.chaos_request({"op": "pause", "target": "broker-1"})
    try:
        reply = cluster.chaos_request({"op": "delay", "target": "broker-1", "ms": 500})
    finally:
        resumed = cluster.chaos_request({"op": "resume", "target": "broker-1"})
    assert reply["unconfirmed"] == {"broker-1": "paused: when resumed"}, reply
    assert "not yet in force on broker-1 (paused: when resumed)" in reply["message"]
    assert "not yet in force" not in resumed["message"], resumed
    started = time.monotonic()
    assert produce_one(cluster.bootstrap, topic) is None
    assert time.monotonic() - started >= 0.5


def test_a_delayed_broker_answers_late(cluster_factory) -> None:
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    topic = f"slow-{uuid.uuid4().hex[:6]}"
    create_replicated_topic(cluster, topic)
    leader = partition_state(cluster, topic)["leader"]
    assert produce_one(cluster.bootstrap, topic, acks="1") is None  # connections made
    cluster.chaos_request({"op": "delay", "target": f"broker-{leader}", "ms": 400})
    started = time.monotonic()
    assert produce_one(cluster.bootstrap, topic, acks="1") is None
    assert time.monotonic() - started >= 0.4
    cluster.chaos_request({"op": "delay", "target": f"broker-{leader}", "ms": 0})


def test_the_cli_cuts_heals_and_refuses_unknown_names(cluster_factory) -> None:
    cluster = cluster_factory(brokers=2)

    def rlog(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "rlog.cli.app", "--data-dir", str(cluster.data_dir)]
        return subprocess.run([*command, *args], capture_output=True, text=True, timeout=60)

    cut = rlog("chaos", "partition", "broker-1", "broker-2", "--clients", "--json")
    assert cut.returncode == 0, cut.stderr
    assert json.loads(cut.stdout)["faults"] == {
        "broker-1": {"cut": ["broker-2", "clients"], "delay_ms": 0, "disk": "ok"},
        "broker-2": {"cut": ["broker-1"], "delay_ms": 0, "disk": "ok"},
    }
    rules = json.loads((cluster.data_dir / "broker-1" / "faults.json").read_text())
    assert rules["cut"] == ["broker-2", "clients"]
    unknown = rlog("chaos", "partition", "broker-1", "broker-9")
    assert unknown.returncode == 5 and "unknown process 'broker-9'" in unknown.stderr
    bad = rlog("chaos", "disk", "broker-1", "melted")
    assert bad.returncode != 0 and "disk state must be one of" in bad.stderr
    healed = rlog("chaos", "heal")
    assert healed.returncode == 0 and "healed" in healed.stdout
    assert json.loads((cluster.data_dir / "broker-1" / "faults.json").read_text())["cut"] == []
