"""Fixtures of the interop suite: Kafka's own tools, and one 3-broker cluster per module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from support.cluster import Cluster, start_cluster
from support.kafka_tools import KafkaTools, fetch
from support.replication import CONFIG

# As a production cluster is set up (three replicas, acks=all needs two of them), with failure
# detection fast enough for tests that kill a broker.
CLUSTER_CONFIG = (
    CONFIG
    + """\
"offsets.topic.replication.factor" = 3
"transaction.state.log.replication.factor" = 3
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
