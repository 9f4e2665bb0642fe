"""A broker's failed disk (rlog chaos disk broker-N full|stall) takes its log dir offline, as
Kafka's LogDirFailureChannel does: it asks the controller to fence it, so its leaderships and
ISR places move to in-sync replicas, while an acks=all producer keeps getting acks; once the
disk is ok again the broker restarts (exit LOG_DIR_RECOVERED, whatever the restart policy),
recovers its logs as after a crash and rejoins the ISR. Nothing acknowledged is lost.

3 brokers, RF=3, min.insync.replicas=2 (support/replication.py's CONFIG). The restart policy
here is "never", so only the log dir's own exit code can bring the broker back.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest

from rlog.daemon.broker.faults import STALL_S
from rlog.daemon.broker.log_dir import PROBE_INTERVAL_S, SLOW_CALL_S
from rlog.daemon.exit_codes import LOG_DIR_RECOVERED
from support.cli_runner import ok, rlog
from support.cluster import Cluster
from support.replication import (
    CONFIG,
    NumberedProducer,
    create_replicated_topic,
    partition_state,
    read_numbers,
    wait_for,
)

pytestmark = pytest.mark.integration

NEVER_RESTART = CONFIG.replace("[cluster]\n", '[cluster]\nrestart_policy = "never"\n')
MOVE_TIMEOUT_S = 10.0  # from the fault to another leader, the old one out of the ISR
BACK_TIMEOUT_S = 60.0  # from "ok" to back in the ISR (a probe, a restart, a registration)


def rlog_at(cluster: Cluster, *args: str) -> str:
    return ok(rlog(*args, data_dir=cluster.data_dir)).out


def broker_status(cluster: Cluster, broker_id: int) -> dict:
    return cluster.status()["brokers"][broker_id - 1]


@pytest.mark.parametrize("fault", ["full", "stall"])
def test_a_failed_disk_moves_leadership_and_the_broker_comes_back(
    cluster_factory, fault: str
) -> None:
    assert SLOW_CALL_S < STALL_S, "a stalled write must count as a failed disk"
    cluster = cluster_factory(brokers=3, config_text=NEVER_RESTART)
    topic = f"disk-{fault}-{uuid.uuid4().hex[:6]}"
    create_replicated_topic(cluster, topic)
    before = partition_state(cluster, topic)
    victim = before["leader"]
    witness = next(b for b in (1, 2, 3) if b != victim)  # asked, not the victim
    victim_pid = cluster.broker_pid(victim)
    producer = NumberedProducer(
        cluster, topic, **{"enable.idempotence": True, "request.timeout.ms": 5000}
    ).start()
    try:
        producer.wait_for_acks(300)
        started = time.monotonic()
        rlog_at(cluster, "chaos", "disk", f"broker-{victim}", fault)
        after = wait_for(
            "another leader, and the victim out of the ISR",
            lambda: (
                (s := partition_state(cluster, topic, via=witness))["leader"] not in (victim, -1)
                and victim not in s["isr"]
                and s
            ),
            timeout_s=MOVE_TIMEOUT_S,
            every_s=0.05,
        )
        moved_s = time.monotonic() - started
        assert isinstance(after, dict) and after["leader_epoch"] > before["leader_epoch"]
        producer.wait_for_acks(300, timeout_s=30)  # acks=all goes on, on the new leader
        described = json.loads(rlog_at(cluster, "topic", "describe", topic, "--json"))
        (partition,) = described["partitions"]
        assert partition["leader"] != victim and victim not in partition["isr"]
        assert partition["offline"].get(str(victim)) == "fenced", partition
        # The process still runs (rlogd shows nothing wrong): only the metadata says fenced.
        assert cluster.broker_pid(victim) == victim_pid
        time.sleep(2 * PROBE_INTERVAL_S)  # probes fail while the disk is bad: no restart
        assert cluster.broker_pid(victim) == victim_pid

        healed = time.monotonic()
        rlog_at(cluster, "chaos", "disk", f"broker-{victim}", "ok")
        wait_for(
            "the victim back in the ISR",
            lambda: partition_state(cluster, topic, via=witness)["isr"] == [1, 2, 3],
            timeout_s=BACK_TIMEOUT_S,
            every_s=0.05,
        )
        back_s = time.monotonic() - healed
        producer.wait_for_acks(300, timeout_s=30)
    finally:
        producer.stop()
    status = broker_status(cluster, victim)
    assert status["pid"] != victim_pid and status["restarts"] == 1, status
    assert status["last_exit"] == LOG_DIR_RECOVERED, status
    events = [
        json.loads(line)
        for line in rlog_at(cluster, "events", "--json", "--kind", "log_dir_failed").splitlines()
    ]
    assert [e["source"] for e in events] == [f"broker-{victim}"], events
    expected = "No space left on device" if fault == "full" else "took"
    assert expected in events[0]["reason"], events[0]
    assert not producer.failed, producer.failed[:10]
    numbers = read_numbers(cluster, topic, len(producer.acked))
    missing = sorted(set(producer.acked) - set(numbers))
    assert not missing, f"{len(missing)} acknowledged records lost: {missing[:20]}"
    assert len(numbers) == len(set(numbers)), "duplicates despite idempotence"
    print(f"disk {fault}: new leader after {moved_s:.2f} s, back in the ISR {back_s:.2f} s later")
