"""Fixtures of the interop suite: Kafka's own tools, franz-go, kafkajs and kcat, and one 3-broker
cluster per module."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support import franz_go, kafkajs, kcat
from support.cluster import Cluster, start_cluster
from support.kafka_tools import KafkaTools, fetch
from support.replication import CONFIG

# As a production cluster is set up (three replicas, acks=all needs two of them), with failure
# detection fast enough for tests that kill a broker, and consumer-protocol (KIP-848) members
# that heartbeat every 500 ms, so an assignment change reaches them within a second.
CLUSTER_CONFIG = (
    CONFIG
    + """\
"offsets.topic.replication.factor" = 3
"transaction.state.log.replication.factor" = 3
"group.consumer.heartbeat.interval.ms" = 500
"group.consumer.session.timeout.ms" = 6000
"""
)


@pytest.fixture(scope="session")
def kafka_tools() -> KafkaTools:
    return KafkaTools(fetch())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    root = tmp_path_factory.mktemp("interop")
    config = root / "rlog.toml"
    config.write_text(CLUSTER_CONFIG)
    cluster = start_cluster(root / "data", brokers=3, config=config)
    yield cluster
    cluster.stop()


# The other clients are fetched (or built) once per session, before the module's cluster starts:
# a first fetch then does not compete with idle brokers for the machine's two cores.


@pytest.fixture(scope="session")
def franz_go_binary() -> Path:
    return franz_go.fetch()


@pytest.fixture(scope="module")
def franz(franz_go_binary: Path, cluster: Cluster) -> franz_go.FranzGo:
    return franz_go.FranzGo(franz_go_binary, cluster.bootstrap)


@pytest.fixture(scope="session")
def kafkajs_modules() -> Path:
    return kafkajs.fetch()


@pytest.fixture(scope="module")
def kafkajs_client(kafkajs_modules: Path, cluster: Cluster) -> kafkajs.Kafkajs:
    return kafkajs.Kafkajs(kafkajs_modules, cluster.bootstrap)


@pytest.fixture(scope="session")
def kcat_tool() -> kcat.Kcat:
    return kcat.fetch()
