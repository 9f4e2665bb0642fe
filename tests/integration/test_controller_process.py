"""The controller process on its own: a real subprocess, a real metadata log, the Kafka wire.

Brokers are played by a blocking client that registers, heartbeats and fetches the metadata log
as a broker's ControllerLink would.
"""

from __future__ import annotations

import os
import resource
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from rlog.core.metadata.image import MetadataImage
from rlog.core.metadata.log_store import METADATA_PARTITION_DIR, METADATA_TOPIC
from rlog.core.metadata.records import (
    ChangePartition,
    CreatePartition,
    CreateTopic,
    FenceBroker,
    MetadataRecord,
    records_from_batches,
)
from rlog.core.protocol.apis import CONTROLLER_SUPPORTED, ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.daemon.exit_codes import ExitCode
from rlog.daemon.wire import BlockingKafkaClient, WireError
from support.cluster import HOST, free_base_port

pytestmark = pytest.mark.integration

CLUSTER_ID = "controller-test-cluster"
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 10.0
SESSION_TIMEOUT_MS = 1000
FAST_SESSION_CONFIG = f"""
[broker]
"broker.session.timeout.ms" = {SESSION_TIMEOUT_MS}
"broker.heartbeat.interval.ms" = 200
"auto.leader.rebalance.enable" = false
"""


# ---- the process ----


@dataclass
class ControllerProcess:
    process: subprocess.Popen[bytes]
    port: int
    data_dir: Path
    stderr_path: Path
    stderr_copier: threading.Thread

    @property
    def pid(self) -> int:
        return self.process.pid

    def client(self) -> BlockingKafkaClient:
        return BlockingKafkaClient(HOST, self.port, timeout_s=10.0)

    def stderr(self) -> str:
        if self.process.poll() is not None:
            self.stderr_copier.join(STOP_TIMEOUT_S)
        return self.stderr_path.read_text(errors="replace")

    def wait_until_serving(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"controller exited {self.process.returncode}:\n{self.stderr()}")
            try:
                with self.client() as client:
                    client.request(ApiKey.API_VERSIONS, 0, {})
                return
            except WireError:
                time.sleep(0.05)
        raise TimeoutError(f"controller not serving after {START_TIMEOUT_S} s:\n{self.stderr()}")

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.process.wait(STOP_TIMEOUT_S)

    def terminate(self) -> int:
        if self.process.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
        return self.process.wait(STOP_TIMEOUT_S)


def _copy(source: Any, path: Path) -> None:
    with path.open("wb") as sink:
        for line in source:
            sink.write(line)
            sink.flush()


class Controllers:
    """Starts controller processes and always stops them (by pid) at the end of a test."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp_path = tmp_path
        self.started: list[ControllerProcess] = []

    def spawn(
        self,
        data_dir: Path,
        *,
        port: int | None = None,
        config_text: str | None = None,
        cluster_id: str = CLUSTER_ID,
        file_size_limit_bytes: int | None = None,
    ) -> ControllerProcess:
        port = port or free_base_port(1)
        command = [
            sys.executable, "-m", "rlog.daemon.controller", "--port", str(port),
            "--data-dir", str(data_dir), "--cluster-id", cluster_id, "--host", HOST,
        ]  # fmt: skip
        if config_text is not None:
            config = self.tmp_path / f"controller-{len(self.started)}.toml"
            config.write_text(config_text)
            command += ["--config", str(config)]
        stderr_path = self.tmp_path / f"controller-{len(self.started)}.stderr"

        def limit_file_size() -> None:  # a full disk, for the disk-error test
            if file_size_limit_bytes is not None:
                limit = (file_size_limit_bytes, file_size_limit_bytes)
                resource.setrlimit(resource.RLIMIT_FSIZE, limit)

        # Through a pipe: a file size limit on the child must not cut its own log short.
        process = subprocess.Popen(
            command,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            preexec_fn=limit_file_size,
        )
        copier = threading.Thread(target=_copy, args=(process.stderr, stderr_path), daemon=True)
        copier.start()
        started = ControllerProcess(process, port, data_dir, stderr_path, copier)
        self.started.append(started)
        return started

    def start(self, data_dir: Path, **options: Any) -> ControllerProcess:
        started = self.spawn(data_dir, **options)
        started.wait_until_serving()
        return started

    def stop_all(self) -> None:
        for started in self.started:
            if started.process.poll() is None:
                os.kill(started.pid, signal.SIGKILL)
                started.process.wait(STOP_TIMEOUT_S)


@pytest.fixture
def controllers(tmp_path: Path) -> Iterator[Controllers]:
    made = Controllers(tmp_path)
    yield made
    made.stop_all()


# ---- a broker's requests ----


def register(
    client: BlockingKafkaClient,
    broker_id: int,
    *,
    cluster_id: str = CLUSTER_ID,
    incarnation_id: uuid.UUID | None = None,
) -> dict[str, Any]:
    body = {
        "broker_id": broker_id,
        "cluster_id": cluster_id,
        "incarnation_id": incarnation_id or uuid.uuid4(),
        "listeners": [
            {"name": "PLAINTEXT", "host": HOST, "port": 9000 + broker_id, "security_protocol": 0}
        ],
        "features": [],
        "rack": None,
    }
    return client.request(ApiKey.BROKER_REGISTRATION, 0, body)


def heartbeat(
    client: BlockingKafkaClient, broker_id: int, broker_epoch: int, metadata_offset: int
) -> dict[str, Any]:
    body = {
        "broker_id": broker_id,
        "broker_epoch": broker_epoch,
        "current_metadata_offset": metadata_offset,
        "want_fence": False,
        "want_shut_down": False,
    }
    return client.request(ApiKey.BROKER_HEARTBEAT, 0, body)


def fetch_body(topic: str, partition: int, offset: int, max_wait_ms: int) -> dict[str, Any]:
    return {
        "replica_id": 1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": 1,
        "max_bytes": 8 << 20,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "log_start_offset": -1,
                        "partition_max_bytes": 8 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def fetch_partition(
    client: BlockingKafkaClient,
    offset: int = 0,
    *,
    max_wait_ms: int = 0,
    topic: str = METADATA_TOPIC,
    partition: int = 0,
) -> dict[str, Any]:
    body = fetch_body(topic, partition, offset, max_wait_ms)
    return client.request(ApiKey.FETCH, 11, body)["responses"][0]["partitions"][0]


def metadata_records(client: BlockingKafkaClient) -> list[tuple[int, MetadataRecord]]:
    """Every committed record, fetched the way a broker does (batch by batch)."""
    records: list[tuple[int, MetadataRecord]] = []
    while True:
        answer = fetch_partition(client, len(records))
        assert answer["error_code"] == ErrorCode.NONE
        found = [r for r in records_from_batches(answer["records"]) if r[0] >= len(records)]
        records += found
        if not found:
            assert len(records) == answer["high_watermark"]
            return records


def image_of(records: list[tuple[int, MetadataRecord]]) -> MetadataImage:
    image = MetadataImage()
    for offset, record in records:
        image.apply(offset, record)
    return image


def start_brokers(client: BlockingKafkaClient, broker_ids: list[int]) -> dict[int, int]:
    """Register and unfence brokers; their epochs."""
    epochs = {}
    for broker_id in broker_ids:
        answer = register(client, broker_id)
        assert answer["error_code"] == ErrorCode.NONE
        epochs[broker_id] = answer["broker_epoch"]
    end = fetch_partition(client)["high_watermark"]
    for broker_id, epoch in epochs.items():
        answer = heartbeat(client, broker_id, epoch, end - 1)
        assert answer["error_code"] == ErrorCode.NONE
        assert answer["is_caught_up"] and not answer["is_fenced"]
    return epochs


def create_topic(
    client: BlockingKafkaClient, name: str, partitions: int, replication_factor: int
) -> dict[str, Any]:
    body = {
        "topics": [
            {"name": name, "num_partitions": partitions, "replication_factor": replication_factor,
             "assignments": [], "configs": []}
        ],
        "timeout_ms": 5000,
        "validate_only": False,
    }  # fmt: skip
    return client.request(ApiKey.CREATE_TOPICS, 4, body)["topics"][0]


def alter_partition(
    client: BlockingKafkaClient,
    broker_id: int,
    broker_epoch: int,
    topic: str,
    partition: int,
    leader_epoch: int,
    new_isr: list[int],
    partition_epoch: int,
) -> dict[str, Any]:
    body = {
        "broker_id": broker_id,
        "broker_epoch": broker_epoch,
        "topics": [
            {
                "topic_name": topic,
                "partitions": [
                    {
                        "partition_index": partition,
                        "leader_epoch": leader_epoch,
                        "new_isr": new_isr,
                        "leader_recovery_state": 0,
                        "partition_epoch": partition_epoch,
                    }
                ],
            }
        ],
    }
    return client.request(ApiKey.ALTER_PARTITION, 1, body)


def elect_preferred(client: BlockingKafkaClient, topic: str, partition: int) -> dict[str, Any]:
    body = {
        "election_type": 0,
        "topic_partitions": [{"topic": topic, "partitions": [partition]}],
        "timeout_ms": 5000,
    }
    return client.request(ApiKey.ELECT_LEADERS, 1, body)


# ---- tests ----


def test_registration_heartbeats_and_refusals(controllers: Controllers, tmp_path: Path) -> None:
    controller = controllers.start(tmp_path / "data")
    with controller.client() as client:
        versions = client.request(ApiKey.API_VERSIONS, 3, {})["api_keys"]
        advertised = {k["api_key"]: (k["min_version"], k["max_version"]) for k in versions}
        assert advertised == {int(key): span for key, span in CONTROLLER_SUPPORTED.items()}
        too_new = client.request(ApiKey.API_VERSIONS, 4, {})
        assert too_new["error_code"] == ErrorCode.UNSUPPORTED_VERSION
        incarnations = {b: uuid.uuid4() for b in (1, 2, 3)}
        epochs = {
            b: register(client, b, incarnation_id=incarnations[b])["broker_epoch"]
            for b in (1, 2, 3)
        }
        assert sorted(epochs.values()) == list(epochs.values())  # each registration's offset
        # Not caught up with its own registration yet: stays fenced.
        first = heartbeat(client, 1, epochs[1], -1)
        assert first["error_code"] == ErrorCode.NONE
        assert first["is_fenced"] and not first["is_caught_up"]
        end = fetch_partition(client)["high_watermark"]
        for broker_id, epoch in epochs.items():
            answer = heartbeat(client, broker_id, epoch, end - 1)
            assert (answer["is_fenced"], answer["is_caught_up"]) == (False, True)

        stale = heartbeat(client, 2, epochs[2] - 1, end)
        assert stale["error_code"] == ErrorCode.STALE_BROKER_EPOCH
        unknown = heartbeat(client, 9, 0, end)
        assert unknown["error_code"] == ErrorCode.BROKER_ID_NOT_REGISTERED
        foreign = register(client, 4, cluster_id="another-cluster")
        assert foreign["error_code"] == ErrorCode.INCONSISTENT_CLUSTER_ID == 104
        assert foreign["broker_epoch"] == -1
        # Another process with a live broker's id is refused; the same process re-registering
        # gets a newer epoch, and the old one is stale from then on.
        duplicate = register(client, 1)
        assert duplicate["error_code"] == ErrorCode.DUPLICATE_BROKER_REGISTRATION
        again = register(client, 1, incarnation_id=incarnations[1])
        assert again["error_code"] == ErrorCode.NONE and again["broker_epoch"] > epochs[3]
        old = heartbeat(client, 1, epochs[1], end)
        assert old["error_code"] == ErrorCode.STALE_BROKER_EPOCH
        stale_alter = alter_partition(client, 1, epochs[1], "t", 0, 0, [1], 0)
        assert stale_alter["error_code"] == ErrorCode.STALE_BROKER_EPOCH

        producer_ids = [
            client.request(
                ApiKey.ALLOCATE_PRODUCER_IDS, 0, {"broker_id": 2, "broker_epoch": epochs[2]}
            )
            for _ in range(2)
        ]
        assert [(p["error_code"], p["producer_id_start"]) for p in producer_ids] == [
            (0, 0),
            (0, producer_ids[0]["producer_id_len"]),
        ]
    assert controller.terminate() == ExitCode.OK


def test_create_topics_placement_and_metadata_fetch(
    controllers: Controllers, tmp_path: Path
) -> None:
    controller = controllers.start(tmp_path / "data")
    with controller.client() as client:
        start_brokers(client, [1, 2, 3])
        created = create_topic(client, "orders", 3, 3)
        assert (created["error_code"], created["error_message"]) == (ErrorCode.NONE, None)
        assert create_topic(client, "orders", 3, 3)["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
        too_many = create_topic(client, "wide", 1, 4)
        assert too_many["error_code"] == ErrorCode.INVALID_REPLICATION_FACTOR
        assert too_many["error_message"]

        records = metadata_records(client)
        assert [r.name for _, r in records if isinstance(r, CreateTopic)] == ["orders"]
        partitions = {r.partition: r for _, r in records if isinstance(r, CreatePartition)}
        assert sorted(partitions) == [0, 1, 2]
        # Round-robin: every broker leads one partition, replicas are rotations of each other.
        assert sorted(p.leader for p in partitions.values()) == [1, 2, 3]
        for p in partitions.values():
            assert sorted(p.replicas) == [1, 2, 3] and p.isr == p.replicas
            assert p.leader == p.replicas[0]
        end = len(records)

        beyond = fetch_partition(client, end + 5)
        assert beyond["error_code"] == ErrorCode.OFFSET_OUT_OF_RANGE
        other = fetch_partition(client, 0, topic="orders")
        assert other["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert fetch_partition(client, 0, partition=1)["error_code"] == (
            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        )

        # Nothing new: the long poll waits its max_wait_ms.
        began = time.monotonic()
        idle = fetch_partition(client, end, max_wait_ms=300)
        assert time.monotonic() - began >= 0.25
        assert (idle["error_code"], bytes(idle["records"]), idle["high_watermark"]) == (0, b"", end)

        # A commit wakes a waiting fetch at once.
        woken: dict[str, Any] = {}

        def long_poll() -> None:
            with controller.client() as poller:
                began = time.monotonic()
                woken["answer"] = fetch_partition(poller, end, max_wait_ms=10_000)
                woken["elapsed_s"] = time.monotonic() - began

        poller = threading.Thread(target=long_poll)
        poller.start()
        time.sleep(0.3)
        assert create_topic(client, "payments", 1, 2)["error_code"] == ErrorCode.NONE
        poller.join(10)
        assert woken["elapsed_s"] < 5
        new = records_from_batches(woken["answer"]["records"])
        assert new[0][0] == end and isinstance(new[0][1], CreateTopic)
        assert new[0][1].name == "payments"
        assert woken["answer"]["high_watermark"] == woken["answer"]["last_stable_offset"] > end


def test_admin_requests(controllers: Controllers, tmp_path: Path) -> None:
    controller = controllers.start(tmp_path / "data")
    with controller.client() as client:
        start_brokers(client, [1, 2])
        assert create_topic(client, "events", 2, 2)["error_code"] == ErrorCode.NONE

        def create_partitions(count: int) -> dict[str, Any]:
            body = {
                "topics": [{"name": "events", "count": count, "assignments": None}],
                "timeout_ms": 5000,
                "validate_only": False,
            }
            return client.request(ApiKey.CREATE_PARTITIONS, 1, body)["results"][0]

        assert create_partitions(4)["error_code"] == ErrorCode.NONE
        shrink = create_partitions(3)
        assert shrink["error_code"] == ErrorCode.INVALID_PARTITIONS and shrink["error_message"]

        def alter(resource_type: int, name: str, operation: int, value: str | None) -> dict:
            body = {
                "resources": [
                    {"resource_type": resource_type, "resource_name": name,
                     "configs": [{"name": "min.insync.replicas", "config_operation": operation,
                                  "value": value}]}
                ],
                "validate_only": False,
            }  # fmt: skip
            return client.request(ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, body)["responses"][0]

        assert alter(2, "events", 0, "2")["error_code"] == ErrorCode.NONE
        assert alter(2, "events", 2, "2")["error_code"] == ErrorCode.INVALID_REQUEST  # APPEND
        assert alter(2, "events", 0, "zero")["error_code"] == ErrorCode.INVALID_CONFIG
        assert alter(2, "nope", 0, "2")["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        broker_wide = alter(4, "1", 0, "2")
        assert (broker_wide["error_code"], broker_wide["resource_name"]) == (0, "1")
        assert alter(4, "", 1, None)["error_code"] == ErrorCode.NONE

        deleted = client.request(
            ApiKey.DELETE_TOPICS, 3, {"topic_names": ["events", "nope"], "timeout_ms": 5000}
        )["responses"]
        assert [(r["name"], r["error_code"]) for r in deleted] == [
            ("events", ErrorCode.NONE),
            ("nope", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ]
        image = image_of(metadata_records(client))
        assert "events" not in image.topics
        assert image.cluster_configs == {}


def test_fencing_alter_partition_and_preferred_election(
    controllers: Controllers, tmp_path: Path
) -> None:
    controller = controllers.start(tmp_path / "data", config_text=FAST_SESSION_CONFIG)
    with controller.client() as client:
        epochs = start_brokers(client, [1, 2, 3])
        assert create_topic(client, "t", 3, 3)["error_code"] == ErrorCode.NONE
        before = image_of(metadata_records(client)).topics["t"].partitions
        (led_by_3,) = [p for p, info in before.items() if info.leader == 3]

        # Brokers 1 and 2 keep heartbeating; broker 3 goes silent and is fenced.
        deadline = time.monotonic() + SESSION_TIMEOUT_MS / 1000 * 5
        while time.monotonic() < deadline:
            end = fetch_partition(client)["high_watermark"]
            for broker_id in (1, 2):
                heartbeat(client, broker_id, epochs[broker_id], end - 1)
            if not image_of(metadata_records(client)).is_live(3):
                break
            time.sleep(0.2)
        records = metadata_records(client)
        assert any(isinstance(r, FenceBroker) and r.broker_id == 3 for _, r in records)
        moved = image_of(records).topics["t"].partitions[led_by_3]
        assert moved.leader in (1, 2) and moved.leader in before[led_by_3].isr
        assert moved.leader_epoch > before[led_by_3].leader_epoch
        assert 3 not in moved.isr
        for info in image_of(records).topics["t"].partitions.values():
            assert 3 not in info.isr and info.leader != 3
        changes = [r for _, r in records if isinstance(r, ChangePartition)]
        assert changes and all("fenced" in change.reason for change in changes)

        # Broker 3 comes back; its leader adds it to the ISR again.
        end = fetch_partition(client)["high_watermark"]
        assert not heartbeat(client, 3, epochs[3], end - 1)["is_fenced"]
        for broker_id in (1, 2):
            heartbeat(client, broker_id, epochs[broker_id], end - 1)
        leader = moved.leader
        grown = alter_partition(
            client, leader, epochs[leader], "t", led_by_3, moved.leader_epoch,
            [*moved.isr, 3], moved.partition_epoch,
        )  # fmt: skip
        assert grown["error_code"] == ErrorCode.NONE
        answer = grown["topics"][0]["partitions"][0]
        assert answer["error_code"] == ErrorCode.NONE
        assert sorted(answer["isr"]) == [1, 2, 3]
        assert answer["partition_epoch"] == moved.partition_epoch + 1
        assert (answer["leader_id"], answer["leader_epoch"]) == (leader, moved.leader_epoch)

        # The same proposal again is stale: refused, with the partition's current state.
        stale = alter_partition(
            client, leader, epochs[leader], "t", led_by_3, moved.leader_epoch,
            list(moved.isr), moved.partition_epoch,
        )["topics"][0]["partitions"][0]  # fmt: skip
        assert stale["error_code"] == ErrorCode.INVALID_UPDATE_VERSION
        assert stale["partition_epoch"] == answer["partition_epoch"]
        assert sorted(stale["isr"]) == [1, 2, 3] and stale["leader_id"] == leader

        # A preferred election gives the partition back to broker 3.
        elected = elect_preferred(client, "t", led_by_3)
        assert elected["error_code"] == ErrorCode.NONE
        (result,) = elected["replica_election_results"]
        assert result["topic"] == "t"
        assert result["partition_result"] == [
            {"partition_id": led_by_3, "error_code": 0, "error_message": None}
        ]
        back = image_of(metadata_records(client)).topics["t"].partitions[led_by_3]
        assert back.leader == 3 and back.leader_epoch > moved.leader_epoch
        again = elect_preferred(client, "t", led_by_3)["replica_election_results"][0]
        assert again["partition_result"][0]["error_code"] == ErrorCode.ELECTION_NOT_NEEDED
    # Operators read one line per committed record.
    assert controller.terminate() == ExitCode.OK
    log_text = controller.stderr()
    assert "broker 3 fenced" in log_text
    assert f"partition t-{led_by_3} leader 3 epoch {back.leader_epoch} isr" in log_text


def test_restart_replays_the_log_and_cuts_a_torn_tail(
    controllers: Controllers, tmp_path: Path
) -> None:
    data_dir = tmp_path / "data"
    controller = controllers.start(data_dir)
    with controller.client() as client:
        epochs = start_brokers(client, [1, 2, 3])
        assert create_topic(client, "kept", 3, 3)["error_code"] == ErrorCode.NONE
        first = image_of(metadata_records(client)).topics["kept"].partitions[0]
        leader = first.leader
        shrunk = alter_partition(
            client, leader, epochs[leader], "kept", 0, first.leader_epoch, [leader],
            first.partition_epoch,
        )  # fmt: skip
        assert shrunk["topics"][0]["partitions"][0]["error_code"] == ErrorCode.NONE
        records = metadata_records(client)
    controller.kill()

    controller = controllers.start(data_dir, port=controller.port)
    with controller.client() as client:
        assert metadata_records(client) == records
        # The replayed controller knows the brokers' epochs and the topic.
        end = len(records)
        assert heartbeat(client, 1, epochs[1], end - 1)["error_code"] == ErrorCode.NONE
        assert create_topic(client, "kept", 1, 1)["error_code"] == ErrorCode.TOPIC_ALREADY_EXISTS
        records = metadata_records(client)
    image = image_of(records)
    controller.kill()

    (segment,) = (data_dir / METADATA_PARTITION_DIR).glob("*.log")
    with segment.open("ab") as torn:
        torn.write(b"\x00\x00\x00\x00\x00\x00\x00\x99" + os.urandom(200))
    controller = controllers.start(data_dir)
    with controller.client() as client:
        assert metadata_records(client) == records
        replayed = image_of(records)
        assert replayed.topics["kept"].partitions == image.topics["kept"].partitions
        assert create_topic(client, "after", 1, 1)["error_code"] == ErrorCode.NONE
        after = metadata_records(client)
        assert after[: len(records)] == records
        assert after[len(records)][0] == len(records)
    assert "cut" in controller.stderr() or "truncat" in controller.stderr()
    assert controller.terminate() == ExitCode.OK


def test_garbage_frame_closes_only_that_connection(
    controllers: Controllers, tmp_path: Path
) -> None:
    controller = controllers.start(tmp_path / "data")
    with controller.client() as client:
        start_brokers(client, [1])
        header = struct.pack(">hhih", ApiKey.BROKER_HEARTBEAT, 0, 7, -1)
        for frame in (
            struct.pack(">i", -5),
            struct.pack(">i", 3) + b"abc",
            struct.pack(">i", len(header) + 3) + header + b"\xff\xff\xff",
            struct.pack(">i", 10) + struct.pack(">hhih", 999, 0, 1, -1),
        ):
            with socket.create_connection((HOST, controller.port), timeout=5) as raw:
                raw.sendall(frame)
                assert raw.recv(4096) == b""  # closed, no answer
            assert create_topic(client, "still-serving", 1, 1)["error_code"] in (
                ErrorCode.NONE,
                ErrorCode.TOPIC_ALREADY_EXISTS,
            )
        assert controller.process.poll() is None


def test_port_in_use_and_bad_config_exit_78(controllers: Controllers, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind((HOST, 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        controller = controllers.spawn(tmp_path / "data", port=port)
        assert controller.process.wait(START_TIMEOUT_S) == ExitCode.CONFIG
    lines = controller.stderr().strip().splitlines()
    assert len(lines) == 1 and "cannot listen" in lines[0], lines

    bad = controllers.spawn(
        tmp_path / "data", config_text='[broker]\n"broker.session.timeout.ms" = "x"\n'
    )
    assert bad.process.wait(START_TIMEOUT_S) == ExitCode.CONFIG
    assert len(bad.stderr().strip().splitlines()) == 1


def test_a_disk_error_stops_the_controller(controllers: Controllers, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    controller = controllers.start(data_dir, file_size_limit_bytes=1500)
    with controller.client() as client:
        epochs = start_brokers(client, [1])
        durable = metadata_records(client)
        with pytest.raises(WireError):
            for index in range(50):  # the log outgrows the file size limit: EFBIG
                created = create_topic(client, f"topic-{index}", 1, 1)
                assert created["error_code"] == ErrorCode.NONE
                durable = metadata_records(client)
    assert controller.process.wait(STOP_TIMEOUT_S) == ExitCode.FAILURE
    assert "not made durable" in controller.stderr()

    controller = controllers.start(data_dir)
    with controller.client() as client:
        assert metadata_records(client) == durable  # only what was answered survives
        assert heartbeat(client, 1, epochs[1], len(durable) - 1)["error_code"] == ErrorCode.NONE
