"""Real Kafka clients produce to and consume from a real broker started through rlogd."""

from __future__ import annotations

import pytest

from support import clients
from support.clients import Message
from support.cluster import start_cluster

pytestmark = pytest.mark.integration

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


@pytest.fixture(scope="module")
def shared_cluster(tmp_path_factory):
    cluster = start_cluster(tmp_path_factory.mktemp("clients"))
    yield cluster
    cluster.stop()


def sample(count: int, partitions: int = 2) -> list[Message]:
    """Keys, values, headers, a null key, a null value, an empty value and binary bytes."""
    messages = []
    for i in range(count):
        key = None if i % 7 == 3 else f"key-{i}".encode()
        value = (
            None  # a null value (kafka-python refuses a null key with it)
            if i % 11 == 5 and key is not None
            else (b"" if i % 13 == 6 else bytes([i % 256]) * (i % 300) + b"v")
        )
        headers = (("h", f"{i}".encode()), ("empty", b"")) if i % 2 else ()
        messages.append(Message(key, value, headers, i % partitions, -1))
    return messages


def assert_same_in_order(sent: list[Message], received: list[Message]) -> None:
    for partition in {m.partition for m in sent}:
        want = [(m.key, m.value, m.headers) for m in sent if m.partition == partition]
        got = [m for m in received if m.partition == partition]
        assert [(m.key, m.value, m.headers) for m in got] == want
        assert [m.offset for m in got] == list(range(len(want)))


PRODUCERS = {
    "confluent": lambda b, t, m, codec: clients.confluent_produce(
        b, t, m, **{"compression.type": codec}
    ),
    "kafka-python": lambda b, t, m, codec: clients.kafka_python_produce(
        b, t, m, compression_type=None if codec == "none" else codec
    ),
    "aiokafka": lambda b, t, m, codec: clients.aiokafka_produce(
        b, t, m, compression_type=None if codec == "none" else codec
    ),
}
CONSUMERS = {
    "confluent": clients.confluent_consume,
    "kafka-python": clients.kafka_python_consume,
    "aiokafka": clients.aiokafka_consume,
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", list(PRODUCERS))
def test_client_round_trip_with_every_codec(shared_cluster, client: str, codec: str) -> None:
    topic = f"rt-{client}-{codec}"
    clients.create_topic(shared_cluster.bootstrap, topic, partitions=2)
    sent = sample(120)
    PRODUCERS[client](shared_cluster.bootstrap, topic, sent, codec)
    # The same client reads its own records back, and so does librdkafka.
    assert_same_in_order(
        sent, CONSUMERS[client](shared_cluster.bootstrap, topic, [0, 1], len(sent))
    )
    if client != "confluent":
        assert_same_in_order(
            sent, clients.confluent_consume(shared_cluster.bootstrap, topic, [0, 1], len(sent))
        )
