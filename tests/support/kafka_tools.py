"""Kafka's own command-line tools and Java client, fetched from Maven Central and run with java.

The jars of `org.apache.kafka:kafka-tools` (which brings `kafka-clients`) come through Maven
itself (`mvn dependency:copy-dependencies` on a generated POM), so every runtime dependency is
resolved from the published POMs. They are cached under the user's cache directory
(`$XDG_CACHE_HOME/rlog/interop/kafka-tools-<version>/lib`): the first run fetches them, later runs
reuse them. A tool runs exactly as Kafka's `bin/kafka-*.sh` scripts run it: its main class with
`java -cp`.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

VERSION = "4.4.0"  # the newest 4.x kafka-tools and kafka-clients on Maven Central
SLF4J_VERSION = "1.7.36"  # the slf4j-api that kafka-tools resolves to; a binding must match it

# The main class behind each of Kafka's bin/ scripts that the interop suite runs.
TOOLS = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-console-producer": "org.apache.kafka.tools.ConsoleProducer",
    "kafka-console-consumer": "org.apache.kafka.tools.consumer.ConsoleConsumer",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-configs": "org.apache.kafka.tools.ConfigCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "kafka-verifiable-producer": "org.apache.kafka.tools.VerifiableProducer",
    "kafka-verifiable-consumer": "org.apache.kafka.tools.VerifiableConsumer",
    "kafka-acls": "org.apache.kafka.tools.AclCommand",
}

POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>rlog.interop</groupId>
  <artifactId>kafka-tools-for-rlog</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId>
      <artifactId>kafka-tools</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>org.slf4j</groupId>
      <artifactId>slf4j-simple</artifactId>
      <version>{slf4j}</version>
    </dependency>
  </dependencies>
</project>
"""

# Small, short-lived JVMs: the C1 compiler only starts them faster, and two cores are shared
# with the brokers under test. The clients' own warnings go to stderr (slf4j-simple).
JVM_OPTIONS = [
    "-Xmx256m",
    "-XX:TieredStopAtLevel=1",
    "-XX:+UseSerialGC",
    "-Djava.awt.headless=true",
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
    "-Dorg.slf4j.simpleLogger.logFile=System.err",
]


def write_properties(path: Path, properties: dict[str, str]) -> Path:
    """A client properties file (`--command-config`) with these settings; `path`. Backslashes and
    line breaks in values are escaped as java.util.Properties reads them."""
    lines = []
    for key, value in properties.items():
        escaped = value.replace("\\", "\\\\").replace("\n", "\\n")
        lines.append(f"{key}={escaped}\n")
    path.write_text("".join(lines))
    return path


class ToolsUnavailable(RuntimeError):
    """java or mvn is missing, or Maven could not fetch the jars."""


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rlog" / "interop"


def fetch(version: str = VERSION) -> Path:
    """The directory of the tools' runtime jars, fetched with Maven on first use. A lock keeps
    two test processes from fetching into the same directory at once."""
    home = cache_dir() / f"kafka-tools-{version}"
    lib = home / "lib"
    done = home / ".complete"
    if done.exists():
        return lib
    if shutil.which("java") is None:
        raise ToolsUnavailable("java is not installed: Kafka's tools need Java 17 or newer")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise ToolsUnavailable("mvn (Maven) is not installed: it fetches Kafka's tools")
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return lib
        (home / "pom.xml").write_text(POM.format(version=version, slf4j=SLF4J_VERSION))
        shutil.rmtree(lib, ignore_errors=True)
        result = subprocess.run(
            [mvn, "-B", "-q", "-f", str(home / "pom.xml"), "dependency:copy-dependencies",
             "-DincludeScope=runtime", f"-DoutputDirectory={lib}"],
            capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        if result.returncode != 0:
            tail = (result.stdout + result.stderr).strip().splitlines()[-5:]
            raise ToolsUnavailable(f"mvn could not fetch kafka-tools {version}: {' | '.join(tail)}")
        done.write_text(version)
    return lib


@dataclass(frozen=True)
class KafkaTools:
    """Runs Kafka's tools from one fetched classpath."""

    lib: Path

    @property
    def classpath(self) -> str:
        return os.pathsep.join(str(jar) for jar in sorted(self.lib.glob("*.jar")))

    def command(self, tool: str, *args: str) -> list[str]:
        java = shutil.which("java")
        assert java is not None
        return [java, *JVM_OPTIONS, "-cp", self.classpath, TOOLS[tool], *args]

    def run(
        self, tool: str, *args: str, input: str | None = None, timeout_s: float = 120.0
    ) -> subprocess.CompletedProcess[str]:
        """Run `tool` (a bin/ script's name, e.g. "kafka-topics") to completion."""
        return subprocess.run(
            self.command(tool, *args), input=input, capture_output=True, text=True,
            timeout=timeout_s, stdin=None if input is not None else subprocess.DEVNULL,
        )  # fmt: skip

    def ok(self, tool: str, *args: str, input: str | None = None, timeout_s: float = 120.0) -> str:
        """Run `tool`, which must exit 0; its stdout."""
        done = self.run(tool, *args, input=input, timeout_s=timeout_s)
        assert done.returncode == 0, (
            f"{tool} {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
        return done.stdout

    def start(self, tool: str, *args: str, stdout: Path) -> subprocess.Popen[bytes]:
        """Start a long-running tool (verifiable producer/consumer), its output to a file."""
        with open(stdout, "wb") as out:
            return subprocess.Popen(
                self.command(tool, *args), stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
