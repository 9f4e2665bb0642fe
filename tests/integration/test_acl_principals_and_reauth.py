"""Who a connection is under enforced ACLs, and SASL sessions over time, on one 2-broker
cluster whose inter-broker listener is SSL with client certificates:

- certificates are named by `ssl.principal.mapping.rules` (`CN=rlog-client,O=rlog demo` is
  `User:CLIENT`), and a certificate no rule names is shut out;
- rlog's own processes (rlogd, followers fetching, the CLI) present the brokers' certificate
  (mapped too, to `User:BROKER`) and keep working: its principal is a super user;
- an SSL client's principal is its certificate's mapped subject;
- `allow.everyone.if.no.acl.found = true` lets a resource without ACLs through;
- before authentication a SASL listener closes a connection announcing a request over
  `sasl.server.max.receive.size`;
- librdkafka and kafka-python re-authenticate (KIP-368) and keep producing across session
  lifetimes; aiokafka, which cannot, is disconnected at its first request after its session
  ends, and reconnects and authenticates again by itself.
"""

from __future__ import annotations

import asyncio
import json
import socket
import ssl
import struct
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaProducer

from rlog.cli.certificates import DemoFiles, demo_files, issue, load_authority, write_keystore
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.daemon.wire import BlockingKafkaClient
from support.cli_runner import ok, rlog
from support.cluster import HOST, free_base_port, spawn_rlogd, stop_rlogd

pytestmark = pytest.mark.integration

BROKERS = 2
SASL_OFFSET = 100
REAUTH_MS = 2000
STARTUP_TIMEOUT_S = 60.0
TIMEOUT_S = 15.0
# No DEFAULT: a subject that is not rlog-<name> of the demo CA's organization gets no name.
MAPPING_RULES = "RULE:^CN=rlog-([a-z]+),O=rlog demo$/$1/U"
CLIENT_PRINCIPAL = "User:CLIENT"


@dataclass
class SecureCluster:
    data_dir: Path
    base_port: int
    files: DemoFiles

    @property
    def ssl(self) -> str:
        return f"localhost:{self.base_port}"

    @property
    def sasl(self) -> str:
        return f"{HOST}:{self.base_port + SASL_OFFSET}"

    def ssl_client(self, keystore: Path | None = None) -> dict[str, Any]:
        keystore = keystore or self.files.client
        return {
            "bootstrap.servers": self.ssl,
            "security.protocol": "SSL",
            "ssl.ca.location": str(self.files.ca),
            "ssl.certificate.location": str(keystore),
            "ssl.key.location": str(keystore),
        }

    def rlog(self, *args: str, stdin: str | None = None) -> str:
        return ok(rlog(*args, data_dir=self.data_dir, stdin=stdin)).out

    def broker_log(self, broker_id: int = 1) -> str:
        return (self.data_dir / "logs" / f"broker-{broker_id}.log").read_text()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    root = tmp_path_factory.mktemp("acl-principals")
    files = demo_files(root / "tls")
    base = free_base_port(BROKERS, (SASL_OFFSET,))
    config = root / "rlog.toml"
    config.write_text(
        f"""[broker]
listeners = "INTERNAL://{HOST}:{base},SASL://{HOST}:{base + SASL_OFFSET}"
"advertised.listeners" = "INTERNAL://localhost:{base},SASL://{HOST}:{base + SASL_OFFSET}"
"listener.security.protocol.map" = "INTERNAL:SSL,SASL:SASL_PLAINTEXT,CONTROLLER:SSL"
"inter.broker.listener.name" = "INTERNAL"
"ssl.keystore.location" = "{files.broker}"
"ssl.truststore.location" = "{files.ca}"
"ssl.client.auth" = "required"
"sasl.enabled.mechanisms" = "SCRAM-SHA-256"
"connections.max.reauth.ms" = {REAUTH_MS}
"authorizer.class.name" = "rlog"
"allow.everyone.if.no.acl.found" = true
"ssl.principal.mapping.rules" = "{MAPPING_RULES}"
"""
    )
    data_dir = root / "data"
    process = spawn_rlogd(data_dir, BROKERS, base, config)
    try:
        cluster = SecureCluster(data_dir, base, files)
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while rlog("topic", "list", data_dir=data_dir).code != 0:  # the CLI speaks TLS itself
            assert time.monotonic() < deadline, "the cluster did not start"
            time.sleep(0.2)
        yield cluster
    finally:
        stop_rlogd(process)


def test_the_controller_checks_acls_over_ssl_and_serves_rlogs_own_certificate(
    cluster: SecureCluster,
) -> None:
    """Over its SSL listener the controller takes the brokers' registrations and the CLI's admin
    requests (the brokers' certificate, a super user: the cluster runs at all), and checks every
    other certificate the truststore accepts against the ACLs: denied CLUSTER_ACTION, a client
    cannot register as a broker."""
    cluster.rlog("acl", "add", "--deny-principal", CLIENT_PRINCIPAL, "-o", "cluster-action",
                 "--cluster")  # fmt: skip
    controller = json.loads((cluster.data_dir / "rlogd.json").read_text())["controller"]
    context = ssl.create_default_context(cafile=str(cluster.files.ca))
    context.load_cert_chain(cluster.files.client)
    context.check_hostname = False
    registration = {
        "broker_id": 7, "cluster_id": "x", "incarnation_id": uuid.uuid4(),
        "listeners": [{"name": "INTERNAL", "host": HOST, "port": 1, "security_protocol": 1}],
        "features": [], "rack": None, "is_migrating_zk_broker": False, "log_dirs": [],
        "previous_broker_epoch": -1,
    }  # fmt: skip
    with BlockingKafkaClient(HOST, controller["port"], timeout_s=TIMEOUT_S, tls=context) as wire:
        answer = wire.request(ApiKey.BROKER_REGISTRATION, 3, registration)
    assert answer["error_code"] == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    metadata = AdminClient(cluster.ssl_client()).list_topics(timeout=TIMEOUT_S)
    assert sorted(metadata.brokers) == list(range(1, BROKERS + 1))


def produce(config: dict[str, Any], topic: str, count: int = 1) -> list[KafkaError | None]:
    outcomes: list[KafkaError | None] = []
    producer = Producer({"message.timeout.ms": 10_000, **config})
    for index in range(count):
        producer.produce(topic, f"v{index}".encode(), on_delivery=lambda e, _m: outcomes.append(e))
    producer.flush(TIMEOUT_S)
    return outcomes


def test_own_processes_are_super_users_and_an_ssl_client_is_its_certificate(
    cluster: SecureCluster,
) -> None:
    # The CLI (the brokers' certificate) creates a replicated topic and writes to it, and the
    # follower, fetching as the brokers' certificate too, catches up.
    cluster.rlog("topic", "create", "replicated", "-p", "1", "-r", str(BROKERS))
    cluster.rlog("produce", "replicated", stdin="a\nb\nc\n")
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        (partition,) = json.loads(cluster.rlog("topic", "describe", "replicated", "--json"))[
            "partitions"
        ]
        if sorted(partition["isr"]) == [1, 2] and partition["high_watermark"] == 3:
            break
        assert time.monotonic() < deadline, f"the follower did not catch up: {partition}"
        time.sleep(0.2)

    for topic in ("mine", "theirs", "open"):
        cluster.rlog("topic", "create", topic, "-p", "1", "-r", "1")
    cluster.rlog(
        "acl", "add", "--allow-principal", CLIENT_PRINCIPAL, "-o", "write", "--topic", "mine"
    )
    cluster.rlog(
        "acl", "add", "--allow-principal", "User:SOMEONE-ELSE", "-o", "write",
        "--topic", "theirs",
    )  # fmt: skip
    client = cluster.ssl_client()
    assert produce(client, "mine") == [None]
    refused = produce(client, "theirs")
    assert [e.code() for e in refused if e] == [KafkaError.TOPIC_AUTHORIZATION_FAILED]
    # No ACL names "open": allow.everyone.if.no.acl.found lets anyone write.
    assert produce(client, "open") == [None]

    events = ok(
        rlog("events", "--json", "--kind", "authorization_denied", data_dir=cluster.data_dir)
    ).out
    denials = [json.loads(line) for line in events.splitlines() if line.strip()]
    assert any(
        e["principal"] == CLIENT_PRINCIPAL and e["resource_name"] == "theirs" for e in denials
    ), denials
    # rlog's own requests were never refused.
    assert all(e["principal"] == CLIENT_PRINCIPAL for e in denials), denials


def test_a_certificate_no_mapping_rule_names_is_shut_out(
    cluster: SecureCluster, tmp_path: Path
) -> None:
    """The truststore accepts it, but ssl.principal.mapping.rules give `CN=stranger` no name:
    as Kafka fails such a client's authentication, the broker closes its connections."""
    stranger = tmp_path / "stranger.pem"
    authority = load_authority(cluster.files.ca.parent)
    write_keystore(stranger, *issue(authority, "stranger"), authority)
    cluster.rlog("topic", "create", "for-strangers", "-p", "1", "-r", "1")
    refused = produce({**cluster.ssl_client(stranger), "message.timeout.ms": 3000}, "for-strangers")
    assert len(refused) == 1 and refused[0] is not None
    log = cluster.broker_log(1) + cluster.broker_log(2)
    assert "no ssl.principal.mapping.rules rule applies to 'CN=stranger,O=rlog demo'" in log
    assert produce(cluster.ssl_client(), "for-strangers") == [None]  # a named client writes


def test_a_large_request_before_authentication_closes_the_connection(
    cluster: SecureCluster,
) -> None:
    with socket.create_connection((HOST, cluster.base_port + SASL_OFFSET), timeout=5) as sock:
        sock.sendall(struct.pack(">i", 524_289))  # one byte over 512 KiB: the prefix suffices
        assert sock.recv(1) == b""  # closed, without reading a body
    with socket.create_connection((HOST, cluster.base_port + SASL_OFFSET), timeout=5) as sock:
        sock.sendall(struct.pack(">i", 524_288))  # at the limit: the broker waits for the body
        sock.settimeout(0.5)
        with pytest.raises(TimeoutError):
            sock.recv(1)


def _sasl_user(cluster: SecureCluster, user: str, password: str) -> None:
    cluster.rlog(
        "user", "create", user, "--password-stdin", "--mechanism", "SCRAM-SHA-256",
        stdin=password + "\n",
    )  # fmt: skip


def test_librdkafka_reauthenticates_and_keeps_producing(cluster: SecureCluster) -> None:
    _sasl_user(cluster, "reauth-rd", "pw-rd")
    cluster.rlog("topic", "create", "reauth-rd", "-p", "1", "-r", "1")
    before = _broker_logs(cluster).count("re-authenticated as User:reauth-rd")
    errors: list[Any] = []
    acknowledged = 0

    def delivered(error: Any, _message: Any) -> None:
        nonlocal acknowledged
        if error is None:
            acknowledged += 1
        else:
            errors.append(error)

    producer = Producer(
        {
            "bootstrap.servers": cluster.sasl,
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "SCRAM-SHA-256",
            "sasl.username": "reauth-rd",
            "sasl.password": "pw-rd",
            "linger.ms": 0,
            "error_cb": errors.append,
        }
    )
    sent = 0
    started = time.monotonic()
    while time.monotonic() - started < 3 * REAUTH_MS / 1000:  # several session lifetimes
        producer.produce("reauth-rd", f"v{sent}".encode(), on_delivery=delivered)
        sent += 1
        producer.poll(0.05)
    assert producer.flush(TIMEOUT_S) == 0
    assert errors == [] and acknowledged == sent
    renewed = _broker_logs(cluster).count("re-authenticated as User:reauth-rd") - before
    assert renewed >= 2, f"{renewed} re-authentications in {3 * REAUTH_MS} ms"


def test_kafka_python_renews_its_session_too(cluster: SecureCluster) -> None:
    """kafka-python 3 implements KIP-368 as well: its connection outlives the session."""
    _sasl_user(cluster, "reauth-py", "pw-py")
    cluster.rlog("topic", "create", "reauth-py", "-p", "1", "-r", "1")
    producer = KafkaProducer(
        bootstrap_servers=cluster.sasl,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="reauth-py",
        sasl_plain_password="pw-py",
    )
    try:
        first = producer.send("reauth-py", b"before").get(timeout=TIMEOUT_S)
        time.sleep(REAUTH_MS / 1000 + 0.5)
        second = producer.send("reauth-py", b"after").get(timeout=TIMEOUT_S)
    finally:
        producer.close()
    assert (first.offset, second.offset) == (0, 1)
    assert "re-authenticated as User:reauth-py" in _broker_logs(cluster)


def _broker_logs(cluster: SecureCluster) -> str:
    return "".join(cluster.broker_log(broker) for broker in range(1, BROKERS + 1))


def test_aiokafka_is_disconnected_when_its_session_ends_and_reconnects(
    cluster: SecureCluster,
) -> None:
    """aiokafka does not re-authenticate: its first request after the session ended closes the
    connection, and it connects and authenticates again by itself."""
    _sasl_user(cluster, "expiring", "pw-aio")
    cluster.rlog("topic", "create", "expiring", "-p", "1", "-r", "1")
    closed_before = _broker_logs(cluster).count("after its session expired")

    async def produce_across_the_session_end() -> tuple[int, int]:
        producer = AIOKafkaProducer(
            bootstrap_servers=cluster.sasl,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username="expiring",
            sasl_plain_password="pw-aio",
            request_timeout_ms=10_000,
        )
        await producer.start()
        try:
            first = await producer.send_and_wait("expiring", b"before")
            await asyncio.sleep(REAUTH_MS / 1000 + 0.5)
            second = await producer.send_and_wait("expiring", b"after")
            return first.offset, second.offset
        finally:
            await producer.stop()

    assert asyncio.run(produce_across_the_session_end()) == (0, 1)  # written once each
    assert _broker_logs(cluster).count("after its session expired") > closed_before
