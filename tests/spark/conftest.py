"""One local SparkSession and one rlogd broker for every Spark test (start-up is slow)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest

from support.cluster import Cluster, start_cluster

pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("spark-cluster"), 1, None)
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    from pyspark.sql import SparkSession

    from rlog.spark import register

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    session = (
        SparkSession.builder.master("local[2]")
        .appName("rlog-spark-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        # Spark's scratch dirs and the JVM's temporary files (lz4's native library) under
        # pytest's own temporary directory, not left in /tmp when the JVM ends.
        .config("spark.local.dir", str(temp := tmp_path_factory.mktemp("spark-tmp")))
        .config("spark.driver.extraJavaOptions", f"-Djava.io.tmpdir={temp}")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    yield session
    session.stop()
    # Stop the py4j gateway too, so no JVM outlives the tests.
    from pyspark import SparkContext

    if SparkContext._gateway is not None:
        SparkContext._gateway.shutdown()
        SparkContext._gateway = None
        SparkContext._jvm = None
