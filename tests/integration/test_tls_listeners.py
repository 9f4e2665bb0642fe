"""Listeners and TLS with real clients: two listeners per broker (PLAINTEXT for the brokers,
SSL with client certificates for clients, which ssl.principal.mapping.rules must name), and
`rlog cluster up --tls`, where every connection of the cluster speaks TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import functools
import json
import ssl
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic
from cryptography.hazmat.primitives.serialization import Encoding

from rlog.cli.certificates import (
    DemoFiles,
    demo_files,
    issue,
    load_authority,
    new_authority,
    write_keystore,
)
from rlog.cli.discovery import broker_answers
from rlog.core.protocol.apis import ApiKey
from rlog.daemon.wire import BlockingKafkaClient
from support.cli_runner import ok, rlog
from support.cluster import (
    HOST,
    all_registered,
    free_base_port,
    spawn_rlogd,
    stop_rlogd,
)

pytestmark = pytest.mark.integration

BROKERS = 3
SSL_OFFSET = 100  # the SSL listener's ports: the PLAINTEXT ones plus this
STARTUP_TIMEOUT_S = 60.0
CLIENT_TIMEOUT_S = 30.0


@dataclass
class TwoListeners:
    data_dir: Path
    base_port: int
    files: DemoFiles
    process: subprocess.Popen[bytes]

    @property
    def internal(self) -> str:
        return ",".join(f"{HOST}:{self.base_port + i}" for i in range(BROKERS))

    @property
    def external(self) -> str:
        """As a client outside would write it: the advertised name, not the address."""
        return ",".join(f"localhost:{self.base_port + SSL_OFFSET + i}" for i in range(BROKERS))

    def client_tls(self, keystore: Path | None = None, ca: Path | None = None) -> dict[str, str]:
        keystore = keystore or self.files.client
        return {
            "security.protocol": "SSL",
            "ssl.ca.location": str(ca or self.files.ca),
            "ssl.certificate.location": str(keystore),
            "ssl.key.location": str(keystore),
        }


def _wait(check, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise TimeoutError(what)


def _metadata(client: BlockingKafkaClient) -> dict:
    return client.request(
        ApiKey.METADATA,
        8,
        {
            "topics": None,
            "allow_auto_topic_creation": False,
            "include_cluster_authorized_operations": False,
            "include_topic_authorized_operations": False,
        },
    )


def _endpoints(metadata: dict) -> list[tuple[int, str, int]]:
    return sorted((b["node_id"], b["host"], b["port"]) for b in metadata["brokers"])


def _tls_context(files: DemoFiles, keystore: Path | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(files.ca))
    context.load_cert_chain(str(keystore or files.client))
    return context


@pytest.fixture(scope="module")
def two_listeners(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoListeners]:
    root = tmp_path_factory.mktemp("tls-two-listeners")
    files = demo_files(root / "tls")
    base = free_base_port(BROKERS, (SSL_OFFSET,))
    config = root / "rlog.toml"
    config.write_text(
        f"""[broker]
listeners = "INTERNAL://{HOST}:{base},EXTERNAL://{HOST}:{base + SSL_OFFSET}"
"advertised.listeners" = "EXTERNAL://localhost:{base + SSL_OFFSET}"
"listener.security.protocol.map" = "INTERNAL:PLAINTEXT,EXTERNAL:SSL,CONTROLLER:PLAINTEXT"
"inter.broker.listener.name" = "INTERNAL"
"ssl.keystore.location" = "{files.broker}"
"ssl.truststore.location" = "{files.ca}"
"ssl.client.auth" = "required"
"ssl.principal.mapping.rules" = "RULE:^CN=rlog-([a-z]+),O=rlog demo$/$1/"
"""
    )
    data_dir = root / "data"
    process = spawn_rlogd(data_dir, BROKERS, base, config)
    cluster = TwoListeners(data_dir, base, files, process)
    try:
        registered = functools.partial(all_registered, base, BROKERS)
        _wait(registered, STARTUP_TIMEOUT_S, "the brokers did not register")
        yield cluster
    finally:
        stop_rlogd(process)


def _create_topic(bootstrap: str, config: dict[str, str], name: str, partitions: int = 3) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, **config})
    futures = admin.create_topics([NewTopic(name, partitions, BROKERS)])
    for future in futures.values():
        future.result(timeout=CLIENT_TIMEOUT_S)


def _end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "end-offsets"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def test_each_listener_answers_with_its_own_endpoints(two_listeners: TwoListeners) -> None:
    base = two_listeners.base_port
    with BlockingKafkaClient(HOST, base, timeout_s=10) as internal:
        brokers = sorted(
            (b["node_id"], b["host"], b["port"]) for b in _metadata(internal)["brokers"]
        )
    assert brokers == [(i + 1, HOST, base + i) for i in range(BROKERS)]
    context = _tls_context(two_listeners.files)
    with BlockingKafkaClient(HOST, base + SSL_OFFSET + 1, timeout_s=10, tls=context) as external:
        brokers = sorted(
            (b["node_id"], b["host"], b["port"]) for b in _metadata(external)["brokers"]
        )
        coordinator = external.request(
            ApiKey.FIND_COORDINATOR, 2, {"key": "some-group", "key_type": 0}
        )
    assert brokers == [(i + 1, "localhost", base + SSL_OFFSET + i) for i in range(BROKERS)]
    assert coordinator["error_code"] == 0, coordinator
    assert coordinator["host"] == "localhost"
    assert coordinator["port"] - SSL_OFFSET - base in range(BROKERS)


def _kafka_python_round_trip(cluster: TwoListeners, topic: str, values: list[bytes]) -> list:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as PythonPartition

    tls = {
        "security_protocol": "SSL",
        "ssl_cafile": str(cluster.files.ca),
        "ssl_certfile": str(cluster.files.client),
        "ssl_keyfile": str(cluster.files.client),
    }
    producer = KafkaProducer(bootstrap_servers=cluster.external.split(","), acks="all", **tls)
    for value in values:
        producer.send(topic, value, partition=1)
    producer.flush(timeout=CLIENT_TIMEOUT_S)
    producer.close()
    consumer = KafkaConsumer(
        bootstrap_servers=cluster.external.split(","),
        auto_offset_reset="earliest",
        consumer_timeout_ms=10_000,
        **tls,
    )
    consumer.assign([PythonPartition(topic, 1)])
    got = [record.value for _, record in zip(range(len(values)), consumer, strict=False)]
    consumer.close()
    return got


async def _aiokafka_round_trip(cluster: TwoListeners, topic: str, values: list[bytes]) -> list:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as AioPartition
    from aiokafka.helpers import create_ssl_context

    def context() -> ssl.SSLContext:
        return create_ssl_context(
            cafile=str(cluster.files.ca),
            certfile=str(cluster.files.client),
            keyfile=str(cluster.files.client),
        )

    producer = AIOKafkaProducer(
        bootstrap_servers=cluster.external, security_protocol="SSL", ssl_context=context()
    )
    await producer.start()
    try:
        for value in values:
            await producer.send_and_wait(topic, value, partition=2)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=cluster.external,
        security_protocol="SSL",
        ssl_context=context(),
        auto_offset_reset="earliest",
    )
    await consumer.start()
    try:
        consumer.assign([AioPartition(topic, 2)])
        await consumer.seek_to_beginning()
        got: list[bytes] = []
        async with asyncio.timeout(CLIENT_TIMEOUT_S):
            while len(got) < len(values):
                batch = await consumer.getmany(timeout_ms=1000)
                got += [record.value for records in batch.values() for record in records]
        return got
    finally:
        await consumer.stop()


def test_three_clients_produce_and_consume_over_mutual_tls(two_listeners: TwoListeners) -> None:
    """librdkafka, kafka-python and aiokafka each write to a partition of an RF=3 topic with
    acks=all through the SSL listener (the followers replicate over PLAINTEXT), and read back
    exactly what they wrote."""
    tls = two_listeners.client_tls()
    topic = "tls-clients"
    _create_topic(two_listeners.external, tls, topic)
    values = [f"librdkafka-{i}".encode() for i in range(200)]
    producer = Producer({"bootstrap.servers": two_listeners.external, "acks": "all", **tls})
    errors: list = []
    for value in values:
        producer.produce(
            topic, value, partition=0, on_delivery=lambda e, _m: e and errors.append(e)
        )
    assert producer.flush(CLIENT_TIMEOUT_S) == 0 and not errors, errors
    consumer = Consumer(
        {"bootstrap.servers": two_listeners.external, "group.id": "tls-readers", **tls}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    read: list[bytes] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(read) < len(values) and time.monotonic() < deadline:
        message = consumer.poll(1.0)
        if message is not None and message.error() is None:
            read.append(message.value())
    consumer.close()
    assert read == values

    python_values = [f"kafka-python-{i}".encode() for i in range(50)]
    assert _kafka_python_round_trip(two_listeners, topic, python_values) == python_values
    aio_values = [f"aiokafka-{i}".encode() for i in range(50)]
    assert asyncio.run(_aiokafka_round_trip(two_listeners, topic, aio_values)) == aio_values
    # Every replica has every record: replication went on over the other listener.
    assert _end_offsets(two_listeners.internal, topic, 3) == [200, 50, 50]


def _refused_produce(bootstrap: str, config: dict[str, str], topic: str) -> list:
    """What a producer with `config` reports when it tries one record (it must fail)."""
    errors: list = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "message.timeout.ms": 4000,
            "error_cb": errors.append,
            **config,
        }
    )
    producer.produce(topic, b"must not land", on_delivery=lambda e, _m: e and errors.append(e))
    producer.flush(10)
    return errors


def test_clients_without_a_good_certificate_are_refused_and_nothing_is_written(
    two_listeners: TwoListeners, tmp_path: Path
) -> None:
    tls = two_listeners.client_tls()
    topic = "tls-refusals"
    _create_topic(two_listeners.external, tls, topic, partitions=1)
    before = _end_offsets(two_listeners.internal, topic, 1)
    authority = load_authority(two_listeners.files.ca.parent)
    now = datetime.datetime.now(datetime.UTC)
    expired = tmp_path / "expired.pem"
    write_keystore(
        expired,
        *issue(
            authority,
            "expired",
            not_before=now - datetime.timedelta(days=10),
            not_after=now - datetime.timedelta(days=1),
        ),
        authority,
    )
    unnamed = tmp_path / "unnamed.pem"  # the CA's, but ssl.principal.mapping.rules name it not
    write_keystore(unnamed, *issue(authority, "unnamed"), authority)
    stranger = new_authority()
    strangers_client = tmp_path / "stranger.pem"
    write_keystore(strangers_client, *issue(stranger, "stranger"), stranger)
    strangers_ca = tmp_path / "stranger-ca.pem"
    strangers_ca.write_bytes(stranger.certificate.public_bytes(Encoding.PEM))

    no_certificate = {"security.protocol": "SSL", "ssl.ca.location": str(two_listeners.files.ca)}
    cases = {
        "no client certificate": no_certificate,
        "an expired certificate": two_listeners.client_tls(keystore=expired),
        "a certificate of another CA": two_listeners.client_tls(keystore=strangers_client),
        "a certificate no mapping rule names": two_listeners.client_tls(keystore=unnamed),
        "trusting another CA": two_listeners.client_tls(ca=strangers_ca),
        "plaintext on the SSL port": {},
    }
    # At once: each waits out its message timeout.
    with ThreadPoolExecutor(len(cases)) as pool:
        reported = {
            what: pool.submit(_refused_produce, two_listeners.external, config, topic)
            for what, config in cases.items()
        }
    for what, errors in reported.items():
        assert errors.result(), f"{what}: the producer reported nothing"
    assert not broker_answers(HOST, two_listeners.base_port + SSL_OFFSET, timeout_s=2)
    # Nothing landed, and both listeners still serve.
    assert _end_offsets(two_listeners.internal, topic, 1) == before
    context = _tls_context(two_listeners.files)
    assert broker_answers(HOST, two_listeners.base_port + SSL_OFFSET, timeout_s=5, tls=context)
    assert broker_answers(HOST, two_listeners.base_port, timeout_s=5)


def test_the_key_password_is_never_shown(two_listeners: TwoListeners) -> None:
    admin = AdminClient({"bootstrap.servers": two_listeners.internal})
    resource = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = admin.describe_configs([resource])[resource].result(timeout=CLIENT_TIMEOUT_S)
    password = configs["ssl.key.password"]
    assert password.is_sensitive and password.value is None
    assert configs["ssl.client.auth"].value == "required"
    assert configs["listeners"].value.startswith("INTERNAL://")


# -- rlog cluster up --tls ------------------------------------------------------------------


@contextlib.contextmanager
def _tls_cluster(data_dir: Path) -> Iterator[tuple[int, str]]:
    base = free_base_port(BROKERS)
    try:
        result = ok(
            rlog(
                "cluster",
                "up",
                "--tls",
                "--brokers",
                str(BROKERS),
                "--base-port",
                str(base),
                data_dir=data_dir,
                timeout=120,
            )
        )
        yield base, result.out
    finally:
        with contextlib.suppress(subprocess.TimeoutExpired):
            rlog("cluster", "down", data_dir=data_dir, timeout=90)


def test_cluster_up_tls_runs_every_connection_over_tls(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    with _tls_cluster(data_dir) as (base, printed):
        files = DemoFiles(data_dir / "tls" / "ca.pem", data_dir / "tls" / "broker.pem",
                          data_dir / "tls" / "client.pem")  # fmt: skip
        # It says how to connect, with the client's own certificate.
        assert "security.protocol=SSL" in printed
        assert f"ssl.certificate.location={files.client}" in printed
        status = json.loads((data_dir / "rlogd.json").read_text())
        assert status["controller"]["tls"] and all(b["tls"] for b in status["brokers"])
        assert not broker_answers(HOST, base, timeout_s=2)  # plaintext is refused
        # The CLI reaches the cluster over TLS by itself; an RF=3 topic gets a full ISR, so
        # the followers fetch over TLS; the controller link is TLS, or nothing would register.
        ok(rlog("topic", "create", "secure", "-p", "1", "-r", "3", data_dir=data_dir))
        ok(
            rlog(
                "produce", "secure", data_dir=data_dir, stdin="".join(f"v{i}\n" for i in range(20))
            )
        )
        read = ok(
            rlog(
                "consume",
                "secure",
                "--from-beginning",
                "-n",
                "20",
                "-f",
                "%v\\n",
                data_dir=data_dir,
            )
        )
        assert read.out.split() == [f"v{i}" for i in range(20)]

        def full_isr() -> bool:
            described = rlog("topic", "describe", "secure", "--json", data_dir=data_dir)
            if described.code != 0:
                return False
            (partition,) = json.loads(described.out)["partitions"]
            return sorted(partition["isr"]) == [1, 2, 3] and partition["high_watermark"] == 20

        _wait(full_isr, CLIENT_TIMEOUT_S, "the followers did not catch up over TLS")
        # A Kafka client with the printed settings.
        settings = dict(
            line.strip().split("=", 1) for line in printed.splitlines() if line.startswith("  ssl.")
        )
        consumer = Consumer(
            {
                "bootstrap.servers": f"{HOST}:{base}",
                "group.id": "printed-settings",
                "security.protocol": "SSL",
                **settings,
            }
        )
        consumer.assign([TopicPartition("secure", 0, 0)])
        got = []
        deadline = time.monotonic() + CLIENT_TIMEOUT_S
        while len(got) < 20 and time.monotonic() < deadline:
            message = consumer.poll(1.0)
            if message is not None and message.error() is None:
                got.append(message.value())
        consumer.close()
        assert got == [f"v{i}".encode() for i in range(20)]
        with pytest.raises(KafkaException):
            AdminClient({"bootstrap.servers": f"{HOST}:{base}"}).list_topics(timeout=3)
