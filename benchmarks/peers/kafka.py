"""Apache Kafka, 3 brokers in KRaft combined mode (each node broker and controller), from jars.

The jars come from Maven Central through Maven itself (``mvn dependency:copy-dependencies`` on a
generated POM naming ``org.apache.kafka:kafka_2.13``), so every runtime dependency is resolved
from the published POMs; they are cached under ``~/.cache/rlog/peers/kafka-<version>/lib``.
Apache publishes no binary distribution tarball to Maven Central, hence the POM route.
"""

from __future__ import annotations

import base64
import os
import shutil
import subprocess
import uuid
from pathlib import Path

from .common import Cluster, PeerUnavailable, cache_dir, free_ports, start_process, wait_kafka

VERSION = "4.1.1"
HEAP = "-Xmx768m"  # three JVMs on a 2-core, 24 GiB machine: enough for the bench, no more

POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>rlog.bench</groupId>
  <artifactId>kafka-peer</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka_2.13</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-slf4j2-impl</artifactId>
      <version>2.24.3</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId>
      <artifactId>log4j-core</artifactId>
      <version>2.24.3</version>
    </dependency>
  </dependencies>
</project>
"""
# Kafka's own logs go to a file at WARN: the console stays readable and logging costs little.
LOG4J2 = """<Configuration status="WARN">
  <Appenders>
    <File name="file" fileName="${sys:kafka.logs.dir}/server.log"/>
  </Appenders>
  <Loggers><Root level="warn"><AppenderRef ref="file"/></Root></Loggers>
</Configuration>
"""


def fetch(version: str = VERSION) -> Path:
    """The directory of Kafka's runtime jars, fetched with Maven on first use."""
    home = cache_dir() / f"kafka-{version}"
    lib = home / "lib"
    done = home / ".complete"
    if done.exists():
        return lib
    mvn = shutil.which("mvn")
    if mvn is None:
        raise PeerUnavailable("mvn (Maven) is not installed: it fetches Kafka's jars")
    if shutil.which("java") is None:
        raise PeerUnavailable("java is not installed")
    home.mkdir(parents=True, exist_ok=True)
    (home / "pom.xml").write_text(POM.format(version=version))
    shutil.rmtree(lib, ignore_errors=True)
    result = subprocess.run(
        [
            mvn,
            "-B",
            "-q",
            "-f",
            str(home / "pom.xml"),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={lib}",
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if result.returncode != 0:
        tail = (result.stdout + result.stderr).strip().splitlines()[-5:]
        raise PeerUnavailable(f"mvn could not fetch kafka_2.13 {version}: {' | '.join(tail)}")
    done.write_text(version)
    return lib


def start(root: Path, brokers: int = 3) -> Cluster:
    """Format and start ``brokers`` combined-mode nodes under ``root``; stop with Cluster.stop."""
    lib = fetch()
    java = shutil.which("java")
    assert java is not None
    classpath = os.pathsep.join(str(p) for p in sorted(lib.glob("*.jar")))
    ports = free_ports(2 * brokers)
    client_ports, controller_ports = ports[:brokers], ports[brokers:]
    voters = ",".join(f"{i + 1}@127.0.0.1:{controller_ports[i]}" for i in range(brokers))
    # KRaft's cluster id: 16 random bytes, URL-safe base64 without padding (as random-uuid).
    cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    (root / "log4j2.xml").write_text(LOG4J2)
    cluster = Cluster(
        name="kafka", bootstrap=",".join(f"127.0.0.1:{p}" for p in client_ports), root=root
    )
    for i in range(brokers):
        node = root / f"node-{i + 1}"
        node.mkdir(parents=True)
        props = node / "server.properties"
        props.write_text(
            "\n".join(
                [
                    "process.roles=broker,controller",
                    f"node.id={i + 1}",
                    f"controller.quorum.voters={voters}",
                    f"listeners=PLAINTEXT://127.0.0.1:{client_ports[i]},"
                    f"CONTROLLER://127.0.0.1:{controller_ports[i]}",
                    f"advertised.listeners=PLAINTEXT://127.0.0.1:{client_ports[i]}",
                    "controller.listener.names=CONTROLLER",
                    "inter.broker.listener.name=PLAINTEXT",
                    "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    f"log.dirs={node / 'data'}",
                    f"num.partitions=1\ndefault.replication.factor={min(3, brokers)}",
                    "min.insync.replicas=2" if brokers >= 3 else "min.insync.replicas=1",
                    f"offsets.topic.replication.factor={min(3, brokers)}",
                    f"transaction.state.log.replication.factor={min(3, brokers)}",
                    "transaction.state.log.min.isr=1",
                    "group.initial.rebalance.delay.ms=0",
                    "auto.create.topics.enable=true",
                    "",
                ]
            )
        )
        env = dict(os.environ)
        jvm = [
            java,
            HEAP,
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={root / 'log4j2.xml'}",
            f"-Dkafka.logs.dir={node}",
            "-cp",
            classpath,
        ]
        formatted = subprocess.run(
            [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props)],
            capture_output=True,
            text=True,
            timeout=180,
            env=env,
        )
        if formatted.returncode != 0:
            cluster.stop()
            tail = (formatted.stdout + formatted.stderr).strip().splitlines()[-3:]
            raise PeerUnavailable(f"kafka-storage format failed: {' | '.join(tail)}")
        cluster.processes.append(
            start_process([*jvm, "kafka.Kafka", str(props)], node / "stdout.log", env=env)
        )
    try:
        wait_kafka(cluster, brokers, timeout_s=120)
    except Exception:
        cluster.stop()
        raise
    return cluster
