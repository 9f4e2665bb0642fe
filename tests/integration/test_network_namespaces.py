"""One cluster across several hosts: each host a network namespace of this machine.

Namespaces A, B and C hang off a bridge in a namespace of their own (so the host's firewall
never sees their traffic), each with one address of a private /24. A runs the controller and
broker 1, B broker 2, C broker 3, each under its own rlogd (`--nodes`) with the same config,
whose [controller] and [broker.N] tables make each bind only its host's address and advertise
it. The test itself is the client, from the root namespace through one more veth on the bridge:
it reaches the brokers only at those addresses.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from confluent_kafka.admin import AdminClient, ClusterMetadata, NewTopic

from rlog.daemon.exit_codes import ExitCode
from rlog.daemon.rlogd.data_files import new_cluster_id

pytestmark = pytest.mark.integration

# A unique prefix per run, so a leftover of a crashed run cannot clash (interface names have at
# most 15 characters, so it stays short).
RUN = f"rl{os.getpid()}"
HOSTS = ("a", "b", "c")  # namespace A runs the controller and broker 1, B broker 2, C broker 3
BROKER_PORT = 9092  # the same on every host: each has its address to itself
CONTROLLER_PORT = 9093
CLIENT_HOST = 254  # the root namespace's address on the bridge
STEP_TIMEOUT_S = 30.0
TOPIC = "across-hosts"
PARTITIONS = 3
Seen = TypeVar("Seen")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=10)
    if check and done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


def _free_subnet() -> ipaddress.IPv4Network:
    """A 10.231.x.0/24 that no route or address of the root namespace overlaps."""
    routes = json.loads(_ip("-j", "-4", "route", "show", "table", "all").stdout or "[]")
    used = []
    for route in routes:
        with contextlib.suppress(ValueError):
            if route.get("dst") not in (None, "default"):
                used.append(ipaddress.ip_network(route["dst"], strict=False))
    candidates = list(range(1, 255))
    random.shuffle(candidates)
    for third in candidates:
        subnet = ipaddress.ip_network(f"10.231.{third}.0/24")
        if not any(subnet.overlaps(each) for each in used):
            return subnet
    raise RuntimeError("no free 10.231.x.0/24 on this machine")


@dataclass
class Network:
    """The namespaces, their addresses and the links between them."""

    subnet: ipaddress.IPv4Network
    namespaces: list[str] = field(default_factory=list)  # made so far: removed at the end
    root_link: str = f"{RUN}c"

    @property
    def hub(self) -> str:
        return f"{RUN}-hub"

    def namespace(self, host: str) -> str:
        return f"{RUN}-{host}"

    def port(self, host: str) -> str:
        """The host's cable, as plugged into the bridge."""
        return f"veth-{host}"

    def address(self, host: str) -> str:
        return str(self.subnet.network_address + HOSTS.index(host) + 1)

    def add_namespace(self, name: str) -> None:
        _ip("netns", "add", name)
        self.namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def build(self) -> None:
        prefix = self.subnet.prefixlen
        self.add_namespace(self.hub)
        _ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.hub, "link", "set", "br0", "up")
        for host in HOSTS:
            namespace = self.namespace(host)
            self.add_namespace(namespace)
            # Made in the hub with its peer straight in the host's namespace: no name in ours.
            _ip("-n", self.hub, "link", "add", "name", self.port(host), "type", "veth",
                "peer", "name", "eth0", "netns", namespace)  # fmt: skip
            _ip("-n", self.hub, "link", "set", self.port(host), "master", "br0", "up")
            _ip("-n", namespace, "addr", "add", f"{self.address(host)}/{prefix}", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
        _ip("link", "add", "name", self.root_link, "type", "veth", "peer", "name", "client",
            "netns", self.hub)  # fmt: skip
        _ip("-n", self.hub, "link", "set", "client", "master", "br0", "up")
        client = self.subnet.network_address + CLIENT_HOST
        _ip("addr", "add", f"{client}/{prefix}", "dev", self.root_link)
        _ip("link", "set", self.root_link, "up")

    def cut(self, host: str) -> None:
        """Unplug the host's cable (its processes keep running)."""
        _ip("-n", self.hub, "link", "set", self.port(host), "down")

    def mend(self, host: str) -> None:
        _ip("-n", self.hub, "link", "set", self.port(host), "up")

    def remove(self) -> None:
        # Removing a namespace destroys its veth ends, and with each its peer.
        _ip("link", "del", self.root_link, check=False)
        for name in reversed(self.namespaces):
            _ip("netns", "del", name, check=False)


@dataclass
class Host:
    """One rlogd on one 'host': its namespace, data dir and process."""

    name: str
    data_dir: Path
    process: subprocess.Popen[bytes]

    def log(self, process: str) -> str:
        path = self.data_dir / "logs" / f"{process}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def output(self) -> str:
        path = self.data_dir / "rlogd.out"
        return path.read_text(errors="replace") if path.exists() else ""

    def kill(self) -> None:
        """SIGKILL to its session: rlogd and every process it started."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)

    def stop(self) -> None:
        """SIGTERM (rlogd stops its processes), then SIGKILL to its session if it hangs."""
        process = self.process
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def _rlogd_command(namespace: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", namespace, sys.executable, "-m", "rlog.daemon.rlogd", *args]


@pytest.fixture
def network() -> Iterator[Network]:
    if shutil.which("ip") is None:
        pytest.skip("needs iproute2's ip")
    probe = f"{RUN}-probe"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        pytest.skip(f"cannot make network namespaces (needs root): {made.stderr.strip()}")
    _ip("netns", "del", probe, check=False)
    network = Network(_free_subnet())
    try:
        network.build()
        yield network
    finally:
        network.remove()


@dataclass
class Hosts:
    """The hosts' rlogds, all with the same config and cluster id."""

    network: Network
    root: Path
    config: Path
    cluster_id: str = field(default_factory=new_cluster_id)
    started: list[Host] = field(default_factory=list)

    def start(
        self, host: str, nodes: str, *, config: Path | None = None, name: str | None = None
    ) -> Host:
        """An rlogd in `host`'s namespace running `nodes`, with its own data dir (named after
        `name`, else the host)."""
        name = name or host
        data_dir = self.root / f"host-{name}"
        data_dir.mkdir()
        command = _rlogd_command(
            self.network.namespace(host),
            "--config", str(config or self.config), "--data-dir", str(data_dir),
            "--nodes", nodes, "--cluster-id", self.cluster_id,
        )  # fmt: skip
        with open(data_dir / "rlogd.out", "ab") as output:
            process = subprocess.Popen(
                command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.started.append(Host(name, data_dir, process))
        return self.started[-1]

    def describe(self) -> str:
        """Every host's rlogd output and process logs, for a failure's message."""
        parts = []
        for host in self.started:
            parts.append(f"=== host {host.name}: rlogd\n{host.output()[-3000:]}")
            for log in sorted((host.data_dir / "logs").glob("*.log")):
                parts.append(f"--- {host.name}/{log.name}\n{host.log(log.stem)[-3000:]}")
        return "\n".join(parts)


@pytest.fixture
def hosts(network: Network, tmp_path: Path) -> Iterator[Hosts]:
    """Start each host's rlogd with `hosts.start(host, nodes)`; every one is stopped at the
    end (by pid, its session killed if it hangs), before the namespaces go."""
    config = tmp_path / "cluster.toml"
    config.write_text(_cluster_config(network))
    started = Hosts(network, tmp_path, config)
    try:
        yield started
    finally:
        for host in started.started:
            # One that will not die must not keep the others running.
            with contextlib.suppress(OSError, subprocess.SubprocessError):
                host.stop()


def _cluster_config(network: Network) -> str:
    """One file for every host: its own listeners per node, the rest cluster-wide. The
    controller binds every address of its host and advertises the one the others reach."""
    a, b, c = (network.address(host) for host in HOSTS)
    return f"""[cluster]
brokers = 3
restart_backoff_ms = 200

[broker]
"default.replication.factor" = 3
"min.insync.replicas" = 2
"offsets.topic.num.partitions" = 3
"transaction.state.log.num.partitions" = 3
"broker.session.timeout.ms" = 3000
"broker.heartbeat.interval.ms" = 500
"replica.lag.time.max.ms" = 3000
"replica.socket.timeout.ms" = 4000

[controller]
listeners = "CONTROLLER://0.0.0.0:{CONTROLLER_PORT}"
"advertised.listeners" = "CONTROLLER://{a}:{CONTROLLER_PORT}"

[broker.1]
listeners = "PLAINTEXT://{a}:{BROKER_PORT}"

[broker.2]
listeners = "PLAINTEXT://{b}:{BROKER_PORT}"

[broker.3]
listeners = "PLAINTEXT://{c}:{BROKER_PORT}"
"""


def _wait_for(
    check: Callable[[], Seen | None],
    what: str,
    timeout_s: float = STEP_TIMEOUT_S,
    describe: Callable[[], str] | None = None,
) -> Seen:
    """What `check` returns once it is true; TimeoutError saying `what` (and `describe()`)."""
    deadline = time.monotonic() + timeout_s
    last: Seen | None = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    details = f"\n{describe()}" if describe is not None else ""
    raise TimeoutError(f"{what} (last seen: {last!r}){details}")


def _metadata(bootstrap: str) -> ClusterMetadata | None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})
    try:
        return admin.list_topics(timeout=3)
    except Exception:  # not answering yet: the caller waits
        return None


def _brokers(metadata: ClusterMetadata | None) -> dict[int, str]:
    if metadata is None:
        return {}
    return {b.id: f"{b.host}:{b.port}" for b in metadata.brokers.values()}


def _partitions(bootstrap: str) -> dict[int, tuple[int, list[int]]] | None:
    """Each partition of the topic: (leader, sorted ISR)."""
    metadata = _metadata(bootstrap)
    topic = metadata.topics.get(TOPIC) if metadata else None
    if topic is None or topic.error is not None or len(topic.partitions) != PARTITIONS:
        return None
    return {p.id: (p.leader, sorted(p.isrs)) for p in topic.partitions.values()}


def _partitions_where(
    bootstrap: str, accept: Callable[[int, list[int]], bool]
) -> dict[int, tuple[int, list[int]]] | None:
    """The topic's partitions if `accept(leader, isr)` holds for every one, else None."""
    found = _partitions(bootstrap)
    return found if found and all(accept(*each) for each in found.values()) else None


def _produce(bootstrap: str, values: list[str]) -> None:
    """acks=all, value i to partition i mod PARTITIONS; every value acknowledged, or the test
    fails with the errors."""
    producer = Producer(
        {"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 25_000}
    )
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            errors.append(error)

    for index, value in enumerate(values):
        producer.produce(TOPIC, value.encode(), partition=index % PARTITIONS, on_delivery=delivered)
    assert producer.flush(STEP_TIMEOUT_S) == 0, "not every record was acknowledged in time"
    assert errors == []


def _by_partition(values: list[str]) -> dict[int, list[str]]:
    """What `_produce` wrote to each partition, in order."""
    return {p: values[p::PARTITIONS] for p in range(PARTITIONS)}


def _consume_all(bootstrap: str, count: int) -> dict[int, list[str]]:
    """The topic from the beginning, by partition, once `count` records have come."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"{RUN}-reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([TOPIC])
    found: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    deadline = time.monotonic() + STEP_TIMEOUT_S
    try:
        while sum(map(len, found.values())) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                found[message.partition()].append(message.value().decode())
    finally:
        consumer.close()
    return found


def _start_apart(network: Network, hosts: Hosts) -> str:
    """Hosts B and C first, then A; the bootstrap address once Metadata lists every broker at
    its host's address."""
    a, b, c = (network.address(host) for host in HOSTS)
    # With no controller yet, a broker keeps trying and says so in its log.
    host_b = hosts.start("b", "broker-2")
    hosts.start("c", "broker-3")
    _wait_for(
        lambda: "controller unreachable" in host_b.log("broker-2"),
        "broker-2 does not log that the controller is unreachable",
        describe=hosts.describe,
    )
    # A host that lacks the address a node binds refuses to start it, naming the address.
    wrong_host = subprocess.run(
        _rlogd_command(
            network.namespace("b"),
            *("--config", str(hosts.config), "--data-dir", str(hosts.root / "wrong-host")),
            *("--nodes", "broker-3", "--cluster-id", hosts.cluster_id),
        ),
        capture_output=True,
        text=True,
        timeout=STEP_TIMEOUT_S,
    )
    assert wrong_host.returncode == ExitCode.CONFIG
    assert f"broker-3's listener PLAINTEXT binds {c}, which is not an address" in wrong_host.stderr
    hosts.start("a", "controller,broker-1")

    bootstrap = f"{a}:{BROKER_PORT}"
    expected = {1: f"{a}:{BROKER_PORT}", 2: f"{b}:{BROKER_PORT}", 3: f"{c}:{BROKER_PORT}"}
    _wait_for(
        lambda: _brokers(_metadata(bootstrap)) == expected,
        f"Metadata does not list the three brokers at {expected}",
        describe=hosts.describe,
    )
    assert "controller reachable again" in host_b.log("broker-2")
    # Each rlogd runs only its own: host B's has broker 2 and no controller.
    status_b = subprocess.run(
        ["ip", "netns", "exec", network.namespace("b"), sys.executable, "-m", "rlog.cli.app",
         "cluster", "status", "--json", "--data-dir", str(host_b.data_dir)],
        capture_output=True, text=True, timeout=STEP_TIMEOUT_S,
    )  # fmt: skip
    assert status_b.returncode == 0, status_b.stderr
    shown = json.loads(status_b.stdout)
    assert (shown["cluster_id"], shown["controller"]) == (hosts.cluster_id, None)
    assert [(row["name"], row["state"]) for row in shown["brokers"]] == [("broker-2", "running")]
    return bootstrap


def _refuses_a_second_broker_2(network: Network, hosts: Hosts, bootstrap: str) -> None:
    """Another broker 2 (on host C, its own port) is refused while the first one lives."""
    b, c = network.address("b"), network.address("c")
    config = hosts.root / "second-broker-2.toml"
    ours = f'"PLAINTEXT://{b}:{BROKER_PORT}"'
    config.write_text(hosts.config.read_text().replace(ours, f'"PLAINTEXT://{c}:9094"'))
    second = hosts.start("c", "broker-2", config=config, name="c-second")
    controller_log = hosts.started[-2].log  # host A's, started just before
    _wait_for(
        lambda: (
            re.search(
                r"broker 2 \(incarnation \S+\) registration refused: "
                "DUPLICATE_BROKER_REGISTRATION",
                controller_log("controller"),
            )
            is not None
        ),
        "the controller does not refuse a second broker 2",
        describe=hosts.describe,
    )
    assert _brokers(_metadata(bootstrap))[2] == f"{b}:{BROKER_PORT}"
    second.kill()


def test_a_cluster_across_three_hosts_serves_through_a_cut_link(
    network: Network, hosts: Hosts
) -> None:
    bootstrap = _start_apart(network, hosts)
    _refuses_a_second_broker_2(network, hosts, bootstrap)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3)])
    created[TOPIC].result(timeout=STEP_TIMEOUT_S)
    found = _wait_for(
        lambda: _partitions_where(bootstrap, lambda _, isr: isr == [1, 2, 3]),
        "the topic's partitions do not all have the ISR 1, 2, 3",
    )
    assert 2 in {leader for leader, _ in found.values()}, found  # so it has one to give up
    first = [f"before-{i}" for i in range(30)]
    _produce(bootstrap, first)
    assert _consume_all(bootstrap, len(first)) == _by_partition(first)

    # Unplug host B: broker 2 keeps running but nobody reaches it, so after the session
    # timeout the controller fences it, its leaderships move, and the ISRs shrink to 1, 3.
    network.cut("b")
    _wait_for(
        lambda: _partitions_where(bootstrap, lambda leader, isr: leader != 2 and isr == [1, 3]),
        "with host B cut off, broker 2 still leads or stays in an ISR",
    )
    second = [f"during-{i}" for i in range(30)]
    _produce(bootstrap, second)  # acks=all with min.insync.replicas=2: still acknowledged

    network.mend("b")
    _wait_for(
        lambda: _partitions_where(bootstrap, lambda _, isr: isr == [1, 2, 3]),
        "broker 2 does not rejoin every ISR once host B is plugged back in",
        timeout_s=45.0,
    )
    assert _consume_all(bootstrap, 60) == _by_partition(first + second)
