"""Fixtures shared by every test: real clusters, always stopped afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from support.cluster import Cluster, start_cluster


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator:
    """Start clusters with `cluster_factory(brokers=1, config_text=None)`; all stopped after."""
    started: list[Cluster] = []

    def make(brokers: int = 1, config_text: str | None = None, name: str = "cluster") -> Cluster:
        config = None
        if config_text is not None:
            config = tmp_path / f"{name}.toml"
            config.write_text(config_text)
        cluster = start_cluster(tmp_path / name, brokers, config)
        started.append(cluster)
        return cluster

    yield make
    for cluster in started:
        cluster.stop()


@pytest.fixture
def cluster(cluster_factory) -> Cluster:
    return cluster_factory()
