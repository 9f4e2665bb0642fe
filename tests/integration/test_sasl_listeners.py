"""SASL with real clients: SCRAM-SHA-256/512 and PLAIN on SASL_PLAINTEXT and SASL_SSL listeners,
users stored as SCRAM credentials (AlterUserScramCredentials), and every refusal answered while
the broker keeps serving and writes nothing for a client that did not authenticate.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    NewTopic,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from rlog.cli.certificates import DemoFiles, demo_files
from rlog.core.protocol.apis import ApiKey
from rlog.daemon.wire import BlockingKafkaClient, WireError
from support.cluster import (
    HOST,
    all_registered,
    free_base_port,
    spawn_rlogd,
    stop_rlogd,
)

pytestmark = pytest.mark.integration

SASL_OFFSET, SASL_SSL_OFFSET = 100, 200
STARTUP_TIMEOUT_S = 60.0
CLIENT_TIMEOUT_S = 30.0
USERS = {"alice": "alice-secret", "bob": "bob-secret"}


@dataclass
class SaslCluster:
    base_port: int
    files: DemoFiles

    @property
    def internal(self) -> str:
        return f"{HOST}:{self.base_port}"

    @property
    def sasl_plaintext(self) -> str:
        return f"{HOST}:{self.base_port + SASL_OFFSET}"

    @property
    def sasl_ssl(self) -> str:
        return f"localhost:{self.base_port + SASL_SSL_OFFSET}"

    def client(self, protocol: str, mechanism: str, user: str, password: str) -> dict[str, str]:
        config = {
            "bootstrap.servers": self.sasl_ssl if protocol == "SASL_SSL" else self.sasl_plaintext,
            "security.protocol": protocol,
            "sasl.mechanism": mechanism,
            "sasl.username": user,
            "sasl.password": password,
        }
        if protocol == "SASL_SSL":
            config["ssl.ca.location"] = str(self.files.ca)
        return config


METADATA_OF_NOTHING = {
    "topics": [],
    "allow_auto_topic_creation": False,
    "include_cluster_authorized_operations": False,
    "include_topic_authorized_operations": False,
}


@pytest.fixture(scope="module")
def sasl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SaslCluster]:
    root = tmp_path_factory.mktemp("sasl")
    files = demo_files(root / "tls")
    base = free_base_port(1, (SASL_OFFSET, SASL_SSL_OFFSET))
    config = root / "rlog.toml"
    listeners = (
        f"INTERNAL://{HOST}:{base},SASL://{HOST}:{base + SASL_OFFSET},"
        f"SECURE://{HOST}:{base + SASL_SSL_OFFSET}"
    )
    protocols = "INTERNAL:PLAINTEXT,SASL:SASL_PLAINTEXT,SECURE:SASL_SSL,CONTROLLER:PLAINTEXT"
    config.write_text(
        f"""[broker]
listeners = "{listeners}"
"listener.security.protocol.map" = "{protocols}"
"inter.broker.listener.name" = "INTERNAL"
"sasl.enabled.mechanisms" = "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN"
"ssl.keystore.location" = "{files.broker}"
"ssl.truststore.location" = "{files.ca}"
"""
    )
    data_dir = root / "data"
    process = spawn_rlogd(data_dir, 1, base, config)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not all_registered(base, 1):
            assert time.monotonic() < deadline, "the broker did not register"
            time.sleep(0.1)
        cluster = SaslCluster(base, files)
        admin = AdminClient({"bootstrap.servers": cluster.internal})
        # One mechanism per request: Kafka refuses a user named twice in one.
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            upserts = [
                UserScramCredentialUpsertion(
                    user, ScramCredentialInfo(mechanism, 8192), password.encode()
                )
                for user, password in USERS.items()
            ]
            for future in admin.alter_user_scram_credentials(upserts).values():
                future.result(timeout=CLIENT_TIMEOUT_S)
        for future in admin.create_topics([NewTopic("sasl-topic", 3, 1)]).values():
            future.result(timeout=CLIENT_TIMEOUT_S)
        yield cluster
    finally:
        stop_rlogd(process)


def _round_trip(config: dict[str, str], partition: int, values: list[bytes]) -> list[bytes]:
    errors: list = []

    def delivered(error: object, _message: object) -> None:
        if error is not None:
            errors.append(error)

    producer = Producer({**config, "acks": "all"})
    for value in values:
        producer.produce("sasl-topic", value, partition=partition, on_delivery=delivered)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0 and not errors, errors
    consumer = Consumer({**config, "group.id": f"sasl-{partition}", "enable.auto.commit": False})
    _low, high = consumer.get_watermark_offsets(TopicPartition("sasl-topic", partition), 10)
    consumer.assign([TopicPartition("sasl-topic", partition, high - len(values))])
    read: list[bytes] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(read) < len(values) and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            read.append(message.value())
    consumer.close()
    return read


@pytest.mark.parametrize(
    ("protocol", "mechanism", "partition"),
    [
        ("SASL_PLAINTEXT", "SCRAM-SHA-256", 0),
        ("SASL_SSL", "SCRAM-SHA-512", 1),
        ("SASL_SSL", "PLAIN", 2),
    ],
)
def test_librdkafka_authenticates_and_round_trips(
    sasl_cluster: SaslCluster, protocol: str, mechanism: str, partition: int
) -> None:
    values = [f"{mechanism}-{i}".encode() for i in range(100)]
    config = sasl_cluster.client(protocol, mechanism, "alice", USERS["alice"])
    assert _round_trip(config, partition, values) == values


def test_kafka_python_and_aiokafka_authenticate_with_scram(sasl_cluster: SaslCluster) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=sasl_cluster.sasl_plaintext,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="bob",
        sasl_plain_password=USERS["bob"],
        acks="all",
    )
    sent = producer.send("sasl-topic", b"kafka-python", partition=0).get(timeout=CLIENT_TIMEOUT_S)
    producer.close()
    assert sent.offset >= 0

    async def aiokafka_send() -> int:
        from aiokafka import AIOKafkaProducer

        aio = AIOKafkaProducer(
            bootstrap_servers=sasl_cluster.sasl_plaintext,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username="bob",
            sasl_plain_password=USERS["bob"],
        )
        await aio.start()
        try:
            return (await aio.send_and_wait("sasl-topic", b"aiokafka", partition=0)).offset
        finally:
            await aio.stop()

    assert asyncio.run(aiokafka_send()) == sent.offset + 1


def _end_offsets(cluster: SaslCluster) -> list[int]:
    consumer = Consumer({"bootstrap.servers": cluster.internal, "group.id": "ends"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition("sasl-topic", p), timeout=10)[1]
            for p in range(3)
        ]
    finally:
        consumer.close()


def _refused(config: dict[str, str]) -> list:
    errors: list = []
    producer = Producer({**config, "message.timeout.ms": 4000, "error_cb": errors.append})
    producer.produce("sasl-topic", b"must not land", on_delivery=lambda e, _m: errors.append(e))
    producer.flush(10)
    return [error for error in errors if error is not None]


def test_bad_credentials_and_unauthenticated_clients_write_nothing(
    sasl_cluster: SaslCluster,
) -> None:
    before = _end_offsets(sasl_cluster)
    wrong = sasl_cluster.client("SASL_PLAINTEXT", "SCRAM-SHA-256", "alice", "not-her-password")
    unknown = sasl_cluster.client("SASL_PLAINTEXT", "SCRAM-SHA-512", "mallory", "guess")
    plain_wrong = sasl_cluster.client("SASL_SSL", "PLAIN", "bob", "nope")
    cases = {"a wrong password": wrong, "an unknown user": unknown,
             "PLAIN, wrong password": plain_wrong}  # fmt: skip
    with ThreadPoolExecutor(len(cases)) as pool:  # at once: each waits out its timeout
        reported = {what: pool.submit(_refused, config) for what, config in cases.items()}
    for what, errors in reported.items():
        found = errors.result()
        assert any("uthentication" in str(error) for error in found), (what, found)
    # A client that does not speak SASL on the SASL listener: its Metadata closes the connection.
    host, port = sasl_cluster.sasl_plaintext.split(":")
    with pytest.raises(WireError), BlockingKafkaClient(host, int(port), timeout_s=5) as client:
        client.request(ApiKey.METADATA, 8, METADATA_OF_NOTHING)
    assert _end_offsets(sasl_cluster) == before
    # The broker still serves the users it knows.
    good = sasl_cluster.client("SASL_PLAINTEXT", "SCRAM-SHA-256", "bob", USERS["bob"])
    assert _round_trip(good, 1, [b"still serving"]) == [b"still serving"]
