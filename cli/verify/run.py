"""One verify run: make a fresh topic, run the workload under the nemesis, heal, drain, check.

The order matters to the checker: the nemesis heals and every producer finishes before the end
offsets are read, and the drain reads up to them, so a write acknowledged during the run that
the drain does not find is a lost-write, not an early stop.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from rlog.cli.verify.checker import check
from rlog.cli.verify.history import Op
from rlog.cli.verify.promises import Promises
from rlog.cli.verify.recorder import Recorder
from rlog.cli.verify.scenarios import Nemesis
from rlog.cli.verify.verdict import Verdict
from rlog.cli.verify.workers import (
    ConsumerWorker,
    ProducerWorker,
    Workload,
    describe,
    drain,
    end_offsets,
)

HEALTHY_WAIT_S = 60.0  # after healing, for every partition to have a leader and a full ISR
DRAIN_TIMEOUT_S = 60.0
WORKER_STOP_S = 30.0  # a worker finishes its op in hand: a send waits for its report
GROUP_FORM_S = 30.0  # for the consumer group to assign every partition before faults start


class VerifyError(Exception):
    """The run could not be made (no topic, no cluster): nothing was checked."""


@dataclass(frozen=True)
class RunSettings:
    topic: str
    seconds: float
    seed: int
    scenario: str
    acks: str
    idempotent: bool
    transactional: bool
    producers: int
    consumers: int
    partitions: int
    replication_factor: int
    min_insync_replicas: int
    properties: dict[str, str] = field(default_factory=dict)  # -X, for every client

    @property
    def isolation(self) -> str:
        return "read_committed" if self.transactional else "read_uncommitted"


@dataclass
class RunResult:
    history: list[Op]
    verdict: Verdict
    faults: int
    drained: bool
    worker_errors: list[str]


def execute(
    run: RunSettings,
    base_config: Callable[[str], dict[str, Any]],
    make_nemesis: Callable[[Callable[[int], int | None]], Nemesis] | None,
    report: Callable[[str], None],
    timeout_s: float,
) -> RunResult:
    """The whole run. `base_config(role)` is a client config without the workload's settings;
    `make_nemesis(leader_of)` builds the nemesis (None: no faults)."""
    admin = AdminClient(base_config("admin"))
    unclean = create_topic(admin, run, timeout_s)
    promises = Promises.from_settings(
        acks=run.acks,
        min_insync_replicas=run.min_insync_replicas,
        idempotence=run.idempotent,
        transactional=run.transactional,
        isolation=run.isolation,
        unclean_leader_election=unclean,
    )
    recorder, stop = Recorder(), threading.Event()
    work = Workload(
        topic=run.topic,
        partitions=run.partitions,
        recorder=recorder,
        stop=stop,
        config=lambda role: client_config(base_config, run, role),
        api_timeout_s=timeout_s,
    )
    members = [ConsumerWorker(work, i, f"{run.topic}-group") for i in range(run.consumers)]
    workers: list[threading.Thread] = [
        *(ProducerWorker(work, i, run.seed, run.transactional) for i in range(run.producers)),
        *members,
    ]
    nemesis = make_nemesis(lambda p: leader_of(admin, run.topic, p)) if make_nemesis else None
    faults = threading.Event()
    nemesis_thread = threading.Thread(
        target=nemesis.run if nemesis else (lambda *_: None),
        args=(faults, run.seconds),
        name="verify-nemesis",
        daemon=True,
    )
    report(f"workload: {run.producers} producers, {run.consumers} consumers on {run.topic}")
    for worker in workers:
        worker.start()
    started = time.monotonic()
    if wait_assigned(members, run.partitions, GROUP_FORM_S):
        report(f"the group assigned every partition after {time.monotonic() - started:.1f} s")
    else:
        report(f"the group has not assigned every partition after {GROUP_FORM_S:g} s")
    nemesis_thread.start()
    try:
        faults.wait(run.seconds)
    except KeyboardInterrupt:  # end the faults early, but still heal, drain and check
        report("interrupted: healing, draining and checking what ran")
    finally:
        faults.set()
        nemesis_thread.join()
        if nemesis is not None:
            nemesis.heal()
            report("healed; waiting for every partition to have its full ISR")
            wait_healthy(admin, run, report)
        stop.set()
        for worker in workers:
            worker.join(WORKER_STOP_S)
    report(f"workload stopped after {len(recorder)} ops; reading the end offsets and draining")
    ends = end_offsets(work)
    drained = drain(work, ends, DRAIN_TIMEOUT_S)
    history = recorder.ops()
    return RunResult(
        history=history,
        verdict=check(history, promises),
        faults=nemesis.faults if nemesis else 0,
        drained=drained,
        worker_errors=list(work.errors),
    )


def wait_assigned(members: list[ConsumerWorker], partitions: int, timeout_s: float) -> bool:
    """Wait until the group has assigned every partition to some member. Faults start only
    then: a coordinator killed every second or two keeps a group from ever forming (each
    JoinGroup round starts over), which tests nothing but patience."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if frozenset().union(*(m.assigned for m in members)) >= set(range(partitions)):
            return True
        time.sleep(0.1)
    return False


def client_config(
    base_config: Callable[[str], dict[str, Any]], run: RunSettings, role: str
) -> dict[str, Any]:
    """The workload's client settings under the user's -X properties."""
    config = base_config(f"verify-{role}")
    if role == "producer":
        config.update(
            {
                "acks": run.acks,
                "enable.idempotence": run.idempotent or run.transactional,
                "linger.ms": 0,
                "message.timeout.ms": 10000,
                "request.timeout.ms": 5000,
                "transaction.timeout.ms": 10000,
            }
        )
    elif role == "consumer":
        config.update(
            {
                "isolation.level": run.isolation,
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 500,
                "auto.offset.reset": "earliest",
            }
        )
    config.update(run.properties)
    return config


def create_topic(admin: AdminClient, run: RunSettings, timeout_s: float) -> bool:
    """Create the run's fresh topic; whether unclean leader election is on for it."""
    topic = NewTopic(
        run.topic,
        num_partitions=run.partitions,
        replication_factor=run.replication_factor,
        config={"min.insync.replicas": str(run.min_insync_replicas)},
    )
    try:
        admin.create_topics([topic], request_timeout=timeout_s)[run.topic].result(timeout_s)
    except KafkaException as exc:
        raise VerifyError(f"cannot create topic {run.topic}: {describe(exc)}") from None
    resource = ConfigResource(ConfigResource.Type.TOPIC, run.topic)
    try:
        configs = admin.describe_configs([resource])[resource].result(timeout_s)
    except KafkaException:
        return False  # Kafka's default
    entry = configs.get("unclean.leader.election.enable")
    return entry is not None and str(entry.value).lower() == "true"


def leader_of(admin: AdminClient, topic: str, partition: int) -> int | None:
    try:
        metadata = admin.list_topics(topic=topic, timeout=5)
    except KafkaException:
        return None
    found = metadata.topics.get(topic)
    if found is None or partition not in found.partitions:
        return None
    leader = found.partitions[partition].leader
    return leader if leader >= 0 else None


def wait_healthy(admin: AdminClient, run: RunSettings, report: Callable[[str], None]) -> bool:
    """Wait until every partition has a leader and all its replicas in sync."""
    deadline = time.monotonic() + HEALTHY_WAIT_S
    while time.monotonic() < deadline:
        try:
            topic = admin.list_topics(topic=run.topic, timeout=5).topics.get(run.topic)
        except KafkaException:
            topic = None
        if (
            topic is not None
            and topic.partitions
            and all(
                p.leader >= 0 and len(p.isrs) == len(p.replicas) for p in topic.partitions.values()
            )
        ):
            return True
        time.sleep(0.5)
    report(f"some partitions of {run.topic} are not fully in sync after {HEALTHY_WAIT_S:g} s")
    return False
