"""rlog chaos schedule: a seeded nemesis. The plan is the seed's alone, and a run of it under
an acks=all idempotent producer loses and duplicates nothing."""

from __future__ import annotations

import subprocess
import sys
import uuid

from support.replication import (
    CONFIG,
    NumberedProducer,
    create_replicated_topic,
    explain_duplicates,
    partition_state,
    read_numbered,
    wait_for,
)

RLOG = [sys.executable, "-m", "rlog.cli.app"]


def dry_run(seed: int) -> str:
    args = ["chaos", "schedule", "--seconds", "60", "--seed", str(seed), "--brokers", "3"]
    done = subprocess.run([*RLOG, *args, "--dry-run"], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_the_seed_alone_decides_the_plan() -> None:
    first = dry_run(11)
    assert first == dry_run(11)
    assert first != dry_run(12)
    assert first.splitlines()[-1].endswith("heal"), "everything is healed at the end"


def test_a_seeded_nemesis_run_loses_and_duplicates_nothing(cluster_factory) -> None:
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    topic = f"nemesis-{uuid.uuid4().hex[:6]}"
    create_replicated_topic(cluster, topic)
    producer = NumberedProducer(
        cluster, topic, **{"enable.idempotence": True, "request.timeout.ms": 3000}
    ).start()
    try:
        producer.wait_for_acks(200)
        args = ["--data-dir", str(cluster.data_dir), "chaos", "schedule"]
        done = subprocess.run(
            [*RLOG, *args, "--seconds", "15", "--seed", "7"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        print(done.stdout)
        wait_for(
            "the ISR to be full after the faults",
            lambda: partition_state(cluster, topic)["isr"] == [1, 2, 3],
            timeout_s=60,
        )
        producer.wait_for_acks(200, timeout_s=60)
    finally:
        producer.stop()
    assert not producer.failed, producer.failed[:10]
    numbered = read_numbered(cluster, topic, len(producer.acked))
    numbers = [number for number, _ in numbered]
    missing = sorted(set(producer.acked) - set(numbers))
    assert not missing, f"{len(missing)} acknowledged records lost: {missing[:20]}"
    assert len(numbers) == len(set(numbers)), "duplicates despite idempotence:\n" + (
        explain_duplicates(cluster, topic, numbered)
    )
