"""Config hot reload: an edit of rlog's TOML file reaches the running brokers (dynamic keys),
rlogd (its restart settings) or is reported as needing a restart (static keys); an invalid edit
changes nothing. `rlog config get|set` does the same from the command line."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, NewTopic, ResourceType
from kafka.admin import ConfigResource as KafkaConfigResource
from kafka.admin import ConfigResourceType, KafkaAdminClient

from rlog.daemon.events import read_events
from support.cluster import Cluster
from support.replication import CONFIG, create_replicated_topic, partition_state, wait_for

RLOG = [sys.executable, "-m", "rlog.cli.app"]


def rlog(cluster: Cluster, *args: str) -> subprocess.CompletedProcess[str]:
    command = [*RLOG, "--data-dir", str(cluster.data_dir), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


def produce_error(cluster: Cluster, topic: str) -> int | None:
    errors: list[KafkaError | None] = []
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "acks": "all", "retries": 0, "linger.ms": 0}
    )
    producer.produce(topic, value=b"x", on_delivery=lambda error, _: errors.append(error))
    assert producer.flush(20) == 0
    return errors[0].code() if errors[0] is not None else None


def config_value(cluster: Cluster, key: str) -> object:
    done = rlog(cluster, "config", "get", key, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)[key]


def kinds(cluster: Cluster) -> list[str]:
    return [e["kind"] for e in read_events(cluster.data_dir) if e["source"] == "rlogd"]


def test_edits_apply_live_or_are_refused_or_wait_for_a_restart(
    cluster_factory, tmp_path: Path
) -> None:
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    config_file = tmp_path / "cluster.toml"
    topic = f"reload-{uuid.uuid4().hex[:6]}"
    create_replicated_topic(cluster, topic)
    leader = partition_state(cluster, topic)["leader"]
    follower = next(b for b in (1, 2, 3) if b != leader)
    cluster.chaos("terminate", f"broker-{follower}")
    wait_for("the ISR to shrink", lambda: len(partition_state(cluster, topic)["isr"]) == 2)
    assert produce_error(cluster, topic) is None

    # A dynamic key, edited by hand: the brokers apply it without a restart.
    text = config_file.read_text()
    config_file.write_text(text.replace('"min.insync.replicas" = 2', '"min.insync.replicas" = 3'))
    wait_for(
        "acks=all to need 3 in sync",
        lambda: produce_error(cluster, topic) == KafkaError.NOT_ENOUGH_REPLICAS,
    )
    assert config_value(cluster, "min.insync.replicas") == 3
    assert "config_reloaded" in kinds(cluster)

    # An invalid edit: rejected, the running config stays, the cluster goes on serving.
    broken = config_file.read_text().replace(
        '"min.insync.replicas" = 3', '"min.insync.replicas" = "three"'
    )
    config_file.write_text(broken)
    wait_for("the edit to be rejected", lambda: "config_rejected" in kinds(cluster))
    assert config_value(cluster, "min.insync.replicas") == 3
    assert produce_error(cluster, topic) == KafkaError.NOT_ENOUGH_REPLICAS

    # rlog config set: validated first, written, applied.
    refused = rlog(cluster, "config", "set", "min.insync.replicas", "zero")
    assert refused.returncode == 2 and "expected an integer" in refused.stderr
    done = rlog(cluster, "config", "set", "min.insync.replicas", "2")
    assert done.returncode == 0, done.stderr
    assert '"min.insync.replicas" = 2' in config_file.read_text()
    wait_for("acks=all to work again", lambda: produce_error(cluster, topic) is None)

    done = rlog(cluster, "config", "set", "log.retention.ms", "3600000")
    assert done.returncode == 0, done.stderr
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    assert future.result(timeout=15)["retention.ms"].value == "3600000"

    # A static key: written, reported as needing a restart, not applied.
    done = rlog(cluster, "config", "set", "num.partitions", "5")
    assert done.returncode == 0 and "needs a restart: [broker] num.partitions" in done.stdout
    assert config_value(cluster, "num.partitions") == 1


def test_a_cluster_default_shows_on_the_broker_and_flags_are_not_file_edits(
    cluster_factory,
) -> None:
    # rlogd runs with --brokers and --base-port (tests/support), over a file that sets neither.
    cluster = cluster_factory(brokers=1, config_text='[broker]\n"min.insync.replicas" = 1\n')
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = f"defaults-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout=15)

    # Only what the edit changed is reported: not the flags' base_port and brokers.
    done = rlog(cluster, "config", "set", "min.insync.replicas", "2")
    assert done.returncode == 0, done.stderr
    assert "applied min.insync.replicas=2" in done.stdout
    assert "needs a restart" not in done.stdout, done.stdout
    assert "override" not in done.stdout, done.stdout

    # The cluster-wide dynamic default shows on the broker as on the topic, as Kafka shows it.
    broker = ConfigResource(ResourceType.BROKER, "1")
    (future,) = admin.describe_configs([broker]).values()
    entries = future.result(timeout=15)
    assert entries["min.insync.replicas"].value == "2"
    assert entries["min.insync.replicas"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    assert not entries["min.insync.replicas"].is_read_only
    assert entries["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    (future,) = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)]).values()
    assert future.result(timeout=15)["min.insync.replicas"].value == "2"
    # kafka-python reads the same (its DescribeConfigs, not librdkafka's).
    legacy = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, request_timeout_ms=15_000)
    try:
        answer = legacy.describe_configs(
            [KafkaConfigResource(ConfigResourceType.BROKER, "1")], config_filter="all"
        )
    finally:
        legacy.close()
    (described,) = answer["broker"].values()
    assert described["min.insync.replicas"]["value"] == "2"
    assert described["min.insync.replicas"]["config_source"] == "DYNAMIC_DEFAULT_BROKER_CONFIG"

    # Editing a key a flag sets changes nothing, and says so once (the file did change it).
    port = cluster.base_port
    done = rlog(cluster, "config", "set", "base_port", str(port + 100))
    assert done.returncode == 0, done.stderr
    assert f"rlogd's flags override the file: --base-port {port}" in done.stdout, done.stdout
    assert "needs a restart" not in done.stdout
    assert config_value(cluster, "base_port") == port
    done = rlog(cluster, "config", "set", "log.retention.ms", "3600000")
    assert done.returncode == 0, done.stderr
    assert "override" not in done.stdout and "needs a restart" not in done.stdout, done.stdout
