"""Kafka's own Java tools (kafka-tools 4.4) and kcat (Debian's, librdkafka underneath) against
rlog's security: one 2-broker cluster whose brokers serve clients on SSL (client certificates
required), SASL_SSL and SASL_PLAINTEXT listeners, replicate over a PLAINTEXT inter-broker
listener, and enforce ACLs with `admin` as the super user.

- SSL with mutual TLS, from the demo CA's PEM files as they are (the Java client reads them as
  `ssl.keystore.type=PEM`, KIP-651): records go round trip; a client without a certificate, or
  with one from another CA, is refused at the handshake; the certificate's subject is the
  principal, so what no ACL allows it is refused with Kafka's authorization error.
- SASL_SSL with SCRAM-SHA-512 (Java): `kafka-acls` (CreateAcls, DescribeAcls) as the super user
  grants a user who was refused: before, Kafka's TopicAuthorizationException and
  ClusterAuthorizationException and nothing written; after, the same user's records round trip.
- kcat (librdkafka) over SSL with client certificates, and with PLAIN and SCRAM on
  SASL_PLAINTEXT and SASL_SSL: a wrong password and a user without ACLs refused, nothing
  written, then a round trip.

Each refusal is followed by a round trip on the same listener: the brokers keep serving. Two
things Kafka does that rlog did not until these tests found them: a SASL_SSL client needs no
certificate under `ssl.client.auth = "required"` (KIP-684), and librdkafka before 2.6.1
(Debian 12's kcat has 2.0.2) authenticates with SCRAM although it repeats its nonce.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from rlog.cli.certificates import DemoFiles, demo_files, issue, new_authority, write_keystore
from support.cli_runner import ok, rlog
from support.cluster import (
    HOST,
    all_registered,
    free_base_port,
    spawn_rlogd,
    stop_rlogd,
)
from support.kafka_tools import KafkaTools, write_properties
from support.kcat import Kcat

pytestmark = pytest.mark.integration

BROKERS = 2
# Each listener's ports: the PLAINTEXT (inter-broker) ones plus its offset.
OFFSETS = {"SSL": 100, "SASL_SSL": 200, "SASL_PLAINTEXT": 300}
STARTUP_TIMEOUT_S = 60.0
TIMEOUT_S = 20.0
SUPER_USER = "admin"
CLIENT_PRINCIPAL = "User:CN=rlog-client,O=rlog demo"  # the demo client certificate's subject
SCRAM_JAAS = (
    'org.apache.kafka.common.security.scram.ScramLoginModule required username="{}" password="{}";'
)


def password(user: str) -> str:
    return f"secret-of-{user}"


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@dataclass
class SecureCluster:
    root: Path
    data_dir: Path
    base_port: int
    files: DemoFiles

    def admin(self) -> AdminClient:
        """An admin client on the inter-broker listener (rlog's own, trusted), made per call (and
        kept until its futures are done): one kept for the module would go on reconnecting once
        the brokers stop."""
        return AdminClient({"bootstrap.servers": self.bootstrap("PLAINTEXT")})

    def bootstrap(self, listener: str) -> str:
        offset = OFFSETS.get(listener, 0)
        return ",".join(f"{HOST}:{self.base_port + offset + i}" for i in range(BROKERS))

    # ---- setup on the trusted listener, as rlog's own tools do it ----

    def add_user(self, user: str, *mechanisms: ScramMechanism) -> None:
        admin = self.admin()
        for mechanism in mechanisms:  # one request each: Kafka refuses a user twice in one
            info = ScramCredentialInfo(mechanism, 4096)
            upsert = UserScramCredentialUpsertion(user, info, password(user).encode())
            for future in admin.alter_user_scram_credentials([upsert]).values():
                future.result(timeout=TIMEOUT_S)

    def create_topic(self, name: str, partitions: int = 2) -> None:
        topic = NewTopic(name, partitions, BROKERS)
        admin = self.admin()
        for future in admin.create_topics([topic]).values():
            future.result(timeout=TIMEOUT_S)

    def allow(self, principal: str, resource: ResourceType, name: str, *ops: AclOperation) -> None:
        bindings = [
            AclBinding(resource, name, ResourcePatternType.LITERAL, principal, "*", operation,
                       AclPermissionType.ALLOW)
            for operation in ops
        ]  # fmt: skip
        admin = self.admin()
        for future in admin.create_acls(bindings).values():
            future.result(timeout=TIMEOUT_S)

    def end_offsets(self, topic: str, partitions: int = 2) -> list[int]:
        """The log end offsets, read on the trusted listener."""
        consumer = Consumer({"bootstrap.servers": self.bootstrap("PLAINTEXT"), "group.id": "ends"})
        try:
            return [
                consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=TIMEOUT_S)[1]
                for p in range(partitions)
            ]
        finally:
            consumer.close()

    def topics(self) -> set[str]:
        return set(self.admin().list_topics(timeout=TIMEOUT_S).topics)

    # ---- the clients' settings ----

    def java_ssl(self, name: str, *, keystore: Path | None) -> Path:
        """A Java client's properties for the SSL listener: PEM truststore, and the keystore (key
        and certificate chain in one PEM file) if given."""
        properties = {
            "security.protocol": "SSL",
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.files.ca),
        }
        if keystore is not None:
            properties |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}
        return write_properties(self.root / f"{name}.properties", properties)

    def java_scram(self, user: str) -> Path:
        """A Java client's properties for the SASL_SSL listener as `user`, SCRAM-SHA-512: a
        truststore, no certificate of its own (KIP-684)."""
        properties = {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "sasl.jaas.config": SCRAM_JAAS.format(user, password(user)),
            "ssl.truststore.type": "PEM",
            "ssl.truststore.location": str(self.files.ca),
        }
        return write_properties(self.root / f"{user}-scram.properties", properties)

    def kcat_tls(self, keystore: Path | None = None) -> list[str]:
        options = ["-X", f"ssl.ca.location={self.files.ca}"]
        if keystore is not None:
            options += ["-X", f"ssl.certificate.location={keystore}",
                        "-X", f"ssl.key.location={keystore}"]  # fmt: skip
        return options

    def kcat_sasl(self, listener: str, mechanism: str, user: str, secret: str) -> list[str]:
        options = ["-b", self.bootstrap(listener), "-X", f"security.protocol={listener}",
                   "-X", f"sasl.mechanism={mechanism}", "-X", f"sasl.username={user}",
                   "-X", f"sasl.password={secret}"]  # fmt: skip
        if listener == "SASL_SSL":
            options += self.kcat_tls()  # no certificate: SASL says who it is (KIP-684)
        return options


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureCluster]:
    root = tmp_path_factory.mktemp("security-interop")
    files = demo_files(root / "tls")
    base = free_base_port(BROKERS, tuple(OFFSETS.values()))
    listeners = ",".join(
        [f"INTERNAL://{HOST}:{base}"]
        + [f"{name}://{HOST}:{base + offset}" for name, offset in OFFSETS.items()]
    )
    config = root / "rlog.toml"
    config.write_text(
        f"""[broker]
listeners = "{listeners}"
"listener.security.protocol.map" = "INTERNAL:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT"
"inter.broker.listener.name" = "INTERNAL"
"ssl.keystore.location" = "{files.broker}"
"ssl.truststore.location" = "{files.ca}"
"ssl.client.auth" = "required"
"sasl.enabled.mechanisms" = "SCRAM-SHA-256,SCRAM-SHA-512,PLAIN"
"authorizer.class.name" = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
"super.users" = "User:{SUPER_USER}"
"offsets.topic.replication.factor" = {BROKERS}
"group.initial.rebalance.delay.ms" = 0
"""  # noqa: E501
    )
    data_dir = root / "data"
    process = spawn_rlogd(data_dir, BROKERS, base, config)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not all_registered(base, BROKERS):
            assert process.poll() is None, f"rlogd exited with {process.returncode}"
            assert time.monotonic() < deadline, "the brokers did not register"
            time.sleep(0.1)
        cluster = SecureCluster(root, data_dir, base, files)
        cluster.add_user(SUPER_USER, ScramMechanism.SCRAM_SHA_512)
        yield cluster
        assert process.poll() is None, "rlogd stopped while the module ran"
    finally:
        stop_rlogd(process)


def refused(done: subprocess.CompletedProcess[str]) -> str:
    """A tool's output, which must not be a success."""
    output = done.stdout + done.stderr
    assert done.returncode != 0, f"exited 0:\n{output}"
    return output


# ---- SSL with client certificates: Kafka's Java tools ------------------------------------------


def test_java_tools_over_mutual_tls_with_the_demo_pem_files(
    kafka_tools: KafkaTools, secure: SecureCluster
) -> None:
    topic, group = unique("tls-java"), unique("tls-java-group")
    secure.create_topic(topic)
    secure.allow(CLIENT_PRINCIPAL, ResourceType.TOPIC, topic, AclOperation.WRITE,
                 AclOperation.READ)  # fmt: skip
    secure.allow(CLIENT_PRINCIPAL, ResourceType.GROUP, group, AclOperation.READ)
    boot = ["--bootstrap-server", secure.bootstrap("SSL")]
    with_cert = secure.java_ssl("tls-client", keystore=secure.files.client)

    # Refused: no client certificate (the handshake fails), and an admin call the certificate's
    # principal has no ACL for (Kafka's TopicAuthorizationException; no topic made).
    no_cert = secure.java_ssl("tls-no-cert", keystore=None)
    output = refused(kafka_tools.run("kafka-topics", *boot, "--command-config", str(no_cert),
                                     "--list"))  # fmt: skip
    assert "SslAuthenticationException" in output and "certificate_required" in output
    denied_topic = unique("tls-denied")
    output = refused(kafka_tools.run("kafka-topics", *boot, "--command-config", str(with_cert),
                                     "--create", "--topic", denied_topic))  # fmt: skip
    assert "TopicAuthorizationException" in output
    assert denied_topic not in secure.topics()

    # Allowed: ten keyed records produced and consumed back in a group, exactly, on both brokers.
    lines = [f"key-{i}\tvalue-{i}" for i in range(10)]
    kafka_tools.ok(
        "kafka-console-producer", *boot, "--command-config", str(with_cert), "--topic", topic,
        "--command-property", "acks=all", "--reader-property", "parse.key=true",
        input="\n".join(lines) + "\n",
    )  # fmt: skip
    out = kafka_tools.ok(
        "kafka-console-consumer", *boot, "--command-config", str(with_cert), "--topic", topic,
        "--group", group, "--from-beginning", "--max-messages", "10", "--timeout-ms", "20000",
        "--formatter-property", "print.key=true",
    )  # fmt: skip
    assert sorted(out.splitlines()) == sorted(lines)
    assert sum(secure.end_offsets(topic)) == 10
    assert all(end > 0 for end in secure.end_offsets(topic))  # both partitions, both leaders


# ---- SASL_SSL, SCRAM-SHA-512, and ACLs made with kafka-acls: Kafka's Java tools -----------------


def test_java_tools_over_sasl_ssl_refused_until_kafka_acls_grants(
    kafka_tools: KafkaTools, secure: SecureCluster
) -> None:
    topic, group, user = unique("scram-java"), unique("scram-java-group"), unique("bob")
    secure.add_user(user, ScramMechanism.SCRAM_SHA_512)
    boot = ["--bootstrap-server", secure.bootstrap("SASL_SSL")]
    admin = ["--command-config", str(secure.java_scram(SUPER_USER))]
    client = ["--command-config", str(secure.java_scram(user))]
    lines = [f"key-{i}\tvalue-{i}" for i in range(10)]
    produce = ["--topic", topic, "--command-property", "acks=all",
               "--reader-property", "parse.key=true"]  # fmt: skip
    consume = ["--topic", topic, "--group", group, "--from-beginning", "--max-messages", "10",
               "--timeout-ms", "20000", "--formatter-property", "print.key=true"]  # fmt: skip

    # The super user creates the topic over SASL_SSL.
    created = kafka_tools.ok("kafka-topics", *boot, *admin, "--create", "--topic", topic,
                             "--partitions", "2", "--replication-factor", "2")  # fmt: skip
    assert f"Created topic {topic}." in created

    # Without ACLs the user may neither write nor read (the console tools report Kafka's error
    # and exit 0, as they do against Kafka), nor grant itself ACLs; nothing is written.
    done = kafka_tools.run("kafka-console-producer", *boot, *client, *produce,
                           input="\n".join(lines) + "\n")  # fmt: skip
    assert f"TopicAuthorizationException: Not authorized to access topics: [{topic}]" in (
        done.stdout + done.stderr
    )
    done = kafka_tools.run("kafka-console-consumer", *boot, *client, *consume)  # exits 0 too
    output = done.stdout + done.stderr
    assert f"TopicAuthorizationException: Not authorized to access topics: [{topic}]" in output
    assert "Processed a total of 0 messages" in output
    grant_itself = ["--add", "--allow-principal", f"User:{user}", "--operation", "All",
                    "--topic", topic]  # fmt: skip
    output = refused(kafka_tools.run("kafka-acls", *boot, *client, *grant_itself))
    assert "ClusterAuthorizationException" in output
    assert secure.end_offsets(topic) == [0, 0]

    # kafka-acls as the super user (CreateAcls) grants writing, then reading in a group.
    kafka_tools.ok("kafka-acls", *boot, *admin, "--add", "--allow-principal", f"User:{user}",
                   "--operation", "Write", "--topic", topic)  # fmt: skip
    kafka_tools.ok("kafka-acls", *boot, *admin, "--add", "--allow-principal", f"User:{user}",
                   "--operation", "Read", "--topic", topic, "--group", group)  # fmt: skip

    # Now the same user's records go round trip, exactly, and only they were written.
    kafka_tools.ok("kafka-console-producer", *boot, *client, *produce,
                   input="\n".join(lines) + "\n")  # fmt: skip
    out = kafka_tools.ok("kafka-console-consumer", *boot, *client, *consume)
    assert sorted(out.splitlines()) == sorted(lines)
    assert sum(secure.end_offsets(topic)) == 10

    # kafka-acls --list (DescribeAcls) shows what was granted, per resource.
    listed = kafka_tools.ok("kafka-acls", *boot, *admin, "--list", "--principal", f"User:{user}")
    entry = "(principal=User:{}, host=*, operation={}, permissionType=ALLOW)"
    by_resource = {
        block.split("`")[1]: block for block in listed.split("Current ACLs for resource ")[1:]
    }
    topic_acls = by_resource[
        f"ResourcePattern(resourceType=TOPIC, name={topic}, patternType=LITERAL)"
    ]
    group_acls = by_resource[
        f"ResourcePattern(resourceType=GROUP, name={group}, patternType=LITERAL)"
    ]
    assert entry.format(user, "WRITE") in topic_acls and entry.format(user, "READ") in topic_acls
    assert entry.format(user, "READ") in group_acls and "WRITE" not in group_acls

    # The broker journaled the refusals, as the user.
    events = ok(rlog("events", "--json", "--kind", "authorization_denied",
                     data_dir=secure.data_dir)).out  # fmt: skip
    denials = [json.loads(line) for line in events.splitlines() if line.strip()]
    assert any(
        f"User:{user}" in json.dumps(event) and topic in json.dumps(event) for event in denials
    ), denials


def test_a_sasl_ssl_client_needs_no_certificate(kcat_tool: Kcat, secure: SecureCluster) -> None:
    done = kcat_tool.run(
        "-b", secure.bootstrap("SASL_SSL"), "-L", "-m", "2", "-X", "security.protocol=SASL_SSL",
        "-X", "sasl.mechanism=PLAIN", "-X", f"sasl.username={SUPER_USER}",
        "-X", f"sasl.password={password(SUPER_USER)}", *secure.kcat_tls(keystore=None),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr


# ---- kcat ------------------------------------------------------------------------------------


def test_kcat_over_mutual_tls(kcat_tool: Kcat, secure: SecureCluster) -> None:
    topic = unique("tls-kcat")
    secure.create_topic(topic)
    secure.allow(CLIENT_PRINCIPAL, ResourceType.TOPIC, topic, AclOperation.WRITE,
                 AclOperation.READ)  # fmt: skip
    ssl = ["-b", secure.bootstrap("SSL"), "-X", "security.protocol=SSL"]

    # Refused at the handshake: no certificate, or one signed by another CA. That CA has the demo
    # CA's very name, so the broker finds the demo CA as its issuer and the signature does not
    # verify: TLS alert decrypt_error (the broker logs CERTIFICATE_VERIFY_FAILED).
    done = kcat_tool.run(*ssl, *secure.kcat_tls(keystore=None), "-L", "-m", "2")
    assert done.returncode != 0 and "certificate required" in done.stderr, done.stderr
    other_ca = new_authority()
    foreign = secure.root / "foreign-client.pem"
    write_keystore(foreign, *issue(other_ca, "rlog-client"), other_ca)
    done = kcat_tool.run(*ssl, *secure.kcat_tls(foreign), "-L", "-m", "2")
    assert done.returncode != 0 and "alert decrypt error" in done.stderr, done.stderr

    # Allowed: records round trip with the demo client certificate.
    lines = [f"key-{i}:value-{i}" for i in range(10)]
    kcat_tool.ok(*ssl, *secure.kcat_tls(secure.files.client), "-P", "-t", topic, "-K:",
                 "-X", "acks=all", input="".join(f"{line}\n" for line in lines))  # fmt: skip
    out = kcat_tool.ok(*ssl, *secure.kcat_tls(secure.files.client), "-C", "-t", topic, "-e",
                       "-f", "%k:%s\n")  # fmt: skip
    assert sorted(out.splitlines()) == sorted(lines)
    assert sum(secure.end_offsets(topic)) == 10


@pytest.mark.parametrize(
    ("listener", "mechanism"),
    [
        ("SASL_PLAINTEXT", "PLAIN"),
        ("SASL_SSL", "PLAIN"),
        ("SASL_PLAINTEXT", "SCRAM-SHA-256"),
        ("SASL_SSL", "SCRAM-SHA-512"),
    ],
)
def test_kcat_over_sasl(
    kcat_tool: Kcat,
    secure: SecureCluster,
    listener: str,
    mechanism: str,
) -> None:
    topic, user = unique("sasl-kcat"), unique("carol")
    secure.add_user(user, ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512)
    secure.create_topic(topic)
    client = secure.kcat_sasl(listener, mechanism, user, password(user))
    lines = [f"key-{i}:value-{i}" for i in range(10)]
    records = "".join(f"{line}\n" for line in lines)
    produce = ["-P", "-t", topic, "-K:", "-X", "acks=all", "-X", "message.timeout.ms=5000"]

    # A wrong password fails authentication; without ACLs the user's records are refused.
    wrong = secure.kcat_sasl(listener, mechanism, user, "not-the-password")
    done = kcat_tool.run(*wrong, *produce, input=records)
    assert done.returncode != 0 and "Authentication failed" in done.stderr, done.stderr
    done = kcat_tool.run(*client, *produce, input=records)
    assert done.returncode != 0 and "Topic authorization failed" in done.stderr, done.stderr
    assert secure.end_offsets(topic) == [0, 0]

    # Allowed: the same records round trip.
    secure.allow(f"User:{user}", ResourceType.TOPIC, topic, AclOperation.WRITE, AclOperation.READ)
    kcat_tool.ok(*client, *produce, input=records)
    out = kcat_tool.ok(*client, "-C", "-t", topic, "-e", "-f", "%k:%s\n")
    assert sorted(out.splitlines()) == sorted(lines)
    assert sum(secure.end_offsets(topic)) == 10
