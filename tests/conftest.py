"""Fixtures shared by every test: real clusters, always stopped afterwards."""

from __future__ import annotations

import compileall
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

import rlog
from support.cluster import Cluster, start_cluster


def pytest_sessionstart(session: pytest.Session) -> None:
    """Compile rlog's bytecode once, before the tests start their Python processes (brokers,
    controllers, rlogd, the `rlog` command). An editable install has none, and with
    PYTHONDONTWRITEBYTECODE set (as on our machines) every process would compile rlog from
    source again: about half of a broker's start-up CPU. Imports read the compiled files
    whether or not they may write them. Under pytest-xdist the controlling process does it,
    before it starts the workers."""
    if "PYTEST_XDIST_WORKER" in os.environ:
        return
    root = Path(rlog.__file__).parent
    compileall.compile_dir(root, maxlevels=0, quiet=1)
    for package in sorted(root.iterdir()):
        if (package / "__init__.py").exists():  # core, daemon, cli, spark
            compileall.compile_dir(package, quiet=1)


def pytest_configure(config: pytest.Config) -> None:
    """Give the processes the tests start a working Ctrl-C, as a terminal gives them.

    A shell starts a background job (`pytest &`, `nohup pytest ... &` in a script) with SIGINT
    ignored; every process it starts inherits that, and Python keeps an ignored SIGINT ignored.
    The tests' Ctrl-C to `rlog events --follow` or `rlog group consume` then did nothing, except
    in workers that had already run a Spark test (SparkContext installs a SIGINT handler of its
    own, so their children start with the default again): it looked like a flake. Runs in the
    controlling process and in each pytest-xdist worker."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


TESTS = Path(__file__).parent
# The order in which pytest-xdist hands out the groups: the Spark tests, the longest single group,
# first; the many short unit-test modules last, where they even out the workers' finishing times.
FOLDER_ORDER = ("spark", "integration", "interop", "tui", "sim", "unit")


def folder_of(item: pytest.Item) -> str:
    """The folder of tests/ that `item` is in: "unit", "spark", ..."""
    return item.path.relative_to(TESTS).parts[0]


def xdist_group(item: pytest.Item) -> str:
    """The unit of work one pytest-xdist worker runs whole: all the Spark tests share one
    SparkSession (a JVM each worker would otherwise start); a simulator test shares nothing, so
    each is its own; any other module's tests share its module-scoped cluster."""
    folder = folder_of(item)
    if folder == "spark":
        return "spark"
    if folder == "sim":
        return item.nodeid
    return item.nodeid.split("::", 1)[0]


def folder_rank(item: pytest.Item) -> int:
    folder = folder_of(item)
    return FOLDER_ORDER.index(folder) if folder in FOLDER_ORDER else len(FOLDER_ORDER)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Marks each test with its xdist group (`--dist loadgroup`, as pyproject.toml sets) and puts
    the groups in FOLDER_ORDER (with `--no-loadscope-reorder`, xdist keeps this order)."""
    items.sort(key=folder_rank)
    for item in items:
        item.add_marker(pytest.mark.xdist_group(xdist_group(item)))


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
