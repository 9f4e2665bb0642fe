"""The exactly-once streaming sink (`writeStream.format("rlog").option("exactlyOnce", "true")`):
a replayed micro-batch writes nothing, an earlier attempt of a task is fenced, and a query whose
output partition leader and whose Spark driver are SIGKILLed still ends with every input record
exactly once in its output, as a read_committed consumer sees it.

Run as a script, this file is the Spark driver of the failover test (see `driver_main`)."""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from streaming_support import finish, run_to_end
from streaming_support import start as start_query

pytestmark = pytest.mark.integration

# 3 brokers, RF 3, min.insync 2, failure detection fast enough for a test; small internal topics.
CONFIG = """
[cluster]
restart_backoff_ms = 500

[broker]
"default.replication.factor" = 3
"min.insync.replicas" = 2
"broker.session.timeout.ms" = 3000
"broker.heartbeat.interval.ms" = 500
"replica.lag.time.max.ms" = 3000
"replica.fetch.backoff.ms" = 100
"offsets.topic.num.partitions" = 4
"offsets.topic.replication.factor" = 3
"transaction.state.log.num.partitions" = 4
"transaction.state.log.replication.factor" = 3
"transaction.state.log.min.isr" = 2
"group.initial.rebalance.delay.ms" = 0
"""

DRIVER_TIMEOUT_S = 240.0  # one run of the driver script
TEST_DEADLINE_S = 600.0  # the whole failover test


# ---- helpers -----------------------------------------------------------------------------


def create_topics(bootstrap: str, partitions: dict[str, int], replication: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(name, n, replication) for name, n in partitions.items()]
    )
    for future in futures.values():
        future.result(timeout=30)


def produce_numbers(bootstrap: str, topic: str, numbers: range, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all"})
    for number in numbers:
        producer.produce(topic, value=b"%d" % number, partition=number % partitions)
        producer.poll(0)
    assert producer.flush(60) == 0, "input records still undelivered after 60 s"


def read_all(bootstrap: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Every value readable at this isolation level, from the start to each partition's end."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"reader-{uuid.uuid4().hex[:8]}",
            "isolation.level": isolation,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[bytes] = []
    at_end: set[int] = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < partitions and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error():
                if message.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(message.partition())
                    continue
                raise KafkaException(message.error())
            at_end.discard(message.partition())
            values.append(message.value())
    finally:
        consumer.close()
    assert len(at_end) == partitions, f"the reader did not reach the end of every {topic} partition"
    return values


def numbers(values: list[bytes]) -> list[int]:
    return sorted(int(v) for v in values)


def batch_files(checkpoint: Path, log: str) -> set[int]:
    """The batch ids in a checkpoint's `offsets` or `commits` log."""
    directory = checkpoint / log
    if not directory.is_dir():
        return set()
    return {int(p.name) for p in directory.iterdir() if p.name.isdigit()}


def wait_until(
    what: str, check: Callable[[], bool], timeout_s: float, every_s: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(every_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def write_options(bootstrap: str, topic: str, **extra: str) -> Any:
    from rlog.spark.options import parse_write_options

    return parse_write_options(
        {"kafka.bootstrap.servers": bootstrap, "topic": topic, "exactlyOnce": "true", **extra}
    )


def rows(values: range) -> Iterator[dict[str, object]]:
    return iter([{"key": None, "value": b"%d" % v} for v in values])


# ---- options -------------------------------------------------------------------------------


def test_exactly_once_options() -> None:
    from rlog.spark.options import RlogOptionError, parse_write_options

    base = {"kafka.bootstrap.servers": "127.0.0.1:1"}
    plain = parse_write_options(base | {"topic": "out"})
    assert not plain.exactly_once
    on = parse_write_options(base | {"topic": "out", "exactlyOnce": "TRUE"})
    assert (on.exactly_once, on.transactional_id_prefix, on.marker_topic) == (
        True, "rlog-spark", "out",
    )  # fmt: skip
    custom = parse_write_options(
        base | {"exactlyOnce": "true", "transactionalIdPrefix": "job", "markerTopic": "marks"}
    )
    assert (custom.topic, custom.transactional_id_prefix, custom.marker_topic) == (
        None, "job", "marks",
    )  # fmt: skip
    with pytest.raises(RlogOptionError, match="markerTopic"):
        parse_write_options(base | {"exactlyOnce": "true"})  # topic from a column, no marker
    with pytest.raises(RlogOptionError, match="needs option 'exactlyOnce'"):
        parse_write_options(base | {"topic": "out", "transactionalIdPrefix": "job"})
    with pytest.raises(RlogOptionError, match="true or false"):
        parse_write_options(base | {"topic": "out", "exactlyOnce": "yes"})
    with pytest.raises(RlogOptionError, match=r"kafka\.transactional\.id"):
        parse_write_options(
            base | {"topic": "out", "exactlyOnce": "true", "kafka.transactional.id": "x"}
        )


# ---- one task, outside Spark ---------------------------------------------------------------


def test_a_replayed_batch_writes_nothing(spark_cluster: Any) -> None:
    from rlog.spark.writer import TaskSlot, committed_batches, write_rows_exactly_once

    bootstrap = spark_cluster.bootstrap
    topic = f"eo-replay-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, {topic: 2}, 1)
    options = write_options(bootstrap, topic)
    query = str(uuid.uuid4())

    first = write_rows_exactly_once(options, rows(range(0, 10)), TaskSlot(query, 0, 0))
    assert (first.records, first.skipped) == (10, False)
    # Batch 0 run again (Spark replaying it after a driver crash): nothing written.
    again = write_rows_exactly_once(options, rows(range(0, 10)), TaskSlot(query, 0, 0))
    assert (again.records, again.skipped) == (0, True)
    # Another slot of batch 0 is independent of slot 0.
    other = write_rows_exactly_once(options, rows(range(10, 15)), TaskSlot(query, 0, 1))
    assert (other.records, other.skipped) == (5, False)
    # The next batch is written; after it, batch 0 is still recognised as done.
    second = write_rows_exactly_once(options, rows(range(15, 20)), TaskSlot(query, 1, 0))
    assert (second.records, second.skipped) == (5, False)
    late = write_rows_exactly_once(options, rows(range(0, 10)), TaskSlot(query, 0, 0))
    assert late.skipped
    # An empty task opens no transaction and writes no marker.
    empty = write_rows_exactly_once(options, iter([]), TaskSlot(query, 1, 7))
    assert (empty.records, empty.skipped) == (0, False)

    assert numbers(read_all(bootstrap, topic, 2, "read_committed")) == list(range(20))
    # The marker: slot 0's group has committed "next batch 2", with a readable note.
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"rlog-spark-{query}-0",
            "enable.auto.commit": False,
        }
    )
    try:
        assert committed_batches(consumer, topic) == 2
        (marker,) = consumer.committed([TopicPartition(topic, 0)], 30)
        assert marker.metadata == "spark batch 1"
    finally:
        consumer.close()


def test_an_earlier_attempt_of_the_task_is_fenced(spark_cluster: Any) -> None:
    from rlog.spark.writer import (
        TaskSlot,
        transactional_producer_config,
        write_rows_exactly_once,
    )

    bootstrap = spark_cluster.bootstrap
    topic = f"eo-zombie-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, {topic: 1}, 1)
    options = write_options(bootstrap, topic, transactionalIdPrefix="fence")
    slot = TaskSlot(str(uuid.uuid4()), 3, 0)
    # A first attempt of the task, stuck after writing part of its rows (a lost executor, say).
    zombie = Producer(transactional_producer_config(options, slot))
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"-1", partition=0)
    assert zombie.flush(30) == 0

    retry = write_rows_exactly_once(options, rows(range(5)), slot)
    assert (retry.records, retry.skipped) == (5, False)
    with pytest.raises(KafkaException):
        zombie.commit_transaction(10)
    assert numbers(read_all(bootstrap, topic, 1, "read_committed")) == list(range(5))
    assert b"-1" in read_all(bootstrap, topic, 1, "read_uncommitted")  # written, never committed


# ---- Spark replays a batch from its checkpoint ----------------------------------------------


def test_spark_replaying_a_batch_from_its_checkpoint_writes_it_once(
    spark: Any, spark_cluster: Any, tmp_path: Path
) -> None:
    bootstrap = spark_cluster.bootstrap
    source, sink = f"eo-in-{uuid.uuid4().hex[:6]}", f"eo-out-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, {source: 3, sink: 2}, 1)
    produce_numbers(bootstrap, source, range(60), 3)
    checkpoint = tmp_path / "checkpoint"

    def run() -> Any:
        writer = (
            spark.readStream.format("rlog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "30")
            .load()
            .selectExpr("key", "value")
            .writeStream.format("rlog")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("topic", sink)
            .option("exactlyOnce", "true")
            .option("checkpointLocation", str(checkpoint))
        )
        query = run_to_end(writer, 180)  # Trigger.AvailableNow, or its stand-in before 4.2
        assert query.exception() is None, query.exception()
        return query

    first = run()
    assert [p["batchId"] for p in first.recentProgress if p["numInputRows"]] == [0, 1]
    assert numbers(read_all(bootstrap, sink, 2, "read_committed")) == list(range(60))

    # As if the driver died after the sink committed batch 1 and before Spark recorded it:
    # the restarted query runs batch 1 again, from the offsets in its offset log.
    for name in ("1", ".1.crc"):
        (checkpoint / "commits" / name).unlink(missing_ok=True)
    second = run()
    assert first.id == second.id  # the query id, part of every transactional id, is kept
    replayed = [p for p in second.recentProgress if p["numInputRows"]]
    assert [(p["batchId"], p["numInputRows"]) for p in replayed] == [(1, 30)]
    assert numbers(read_all(bootstrap, sink, 2, "read_committed")) == list(range(60))
    assert numbers(read_all(bootstrap, sink, 2, "read_uncommitted")) == list(range(60))

    # A batch write cannot be exactly-once: a clear error.
    frame = spark.createDataFrame([("v",)], "value string")
    with pytest.raises(Exception, match="for streaming writes"):
        frame.write.format("rlog").mode("append").option(
            "kafka.bootstrap.servers", bootstrap
        ).option("topic", sink).option("exactlyOnce", "true").save()


# ---- the failover test: leader and driver SIGKILLed mid-query ----------------------------------


def partition_leader(bootstrap: str, topic: str, partition: int) -> int:
    metadata = AdminClient({"bootstrap.servers": bootstrap}).list_topics(topic, timeout=10)
    return metadata.topics[topic].partitions[partition].leader


def descendants(pid: int) -> list[int]:
    """The pids of every process below `pid` (children, grandchildren, ...), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


class Driver:
    """One run of this file as a Spark driver script, in its own process group (the Python
    driver, its JVM and the JVM's Python workers), so a SIGKILL of the group is a driver crash."""

    def __init__(self, args: list[str], log_path: Path) -> None:
        self.log_path = log_path
        with open(log_path, "ab") as output:
            self.process = subprocess.Popen(
                [sys.executable, __file__, *args],
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=Path(__file__).resolve().parents[2],
            )

    def kill(self) -> None:
        """SIGKILL the driver and everything it started: its process group (the Python driver
        and the JVM) and, by pid, the JVM's Python workers, which PySpark's worker daemon puts
        in a group of their own (left alone, a worker could finish its task's transaction)."""
        if self.process.poll() is None:
            tree = descendants(self.process.pid)
            os.killpg(self.process.pid, signal.SIGKILL)
            for pid in tree:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        self.process.wait(timeout=30)

    def wait(self, timeout_s: float) -> int:
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the driver did not finish in {timeout_s} s") from None

    def running(self) -> bool:
        return self.process.poll() is None


class MarkerWatch:
    """The sink's marker groups, read as the sink reads them: for each slot (Spark partition) of
    the query, the next batch it has to write (so every batch below it is committed in Kafka)."""

    def __init__(self, bootstrap: str, marker_topic: str, query_id: str, slots: int) -> None:
        self.marker_topic = marker_topic
        self.consumers = [
            Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": f"rlog-spark-{query_id}-{slot}",
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                }
            )
            for slot in range(slots)
        ]

    def batches_done(self) -> list[int]:
        """Per slot, the batches it committed (0 if unknown just now)."""
        done = []
        for consumer in self.consumers:
            try:
                (got,) = consumer.committed([TopicPartition(self.marker_topic, 0)], 5)
                done.append(max(got.offset, 0) if got.error is None else 0)
            except KafkaException:
                done.append(0)
        return done

    def close(self) -> None:
        for consumer in self.consumers:
            consumer.close()


def open_records(bootstrap: str, topic: str, partitions: int) -> int:
    """Records of open transactions in `topic`: the high watermarks minus the LSOs."""
    total = 0
    for isolation, sign in (("read_uncommitted", 1), ("read_committed", -1)):
        consumer = WATERMARKS.get(isolation)
        if consumer is None:
            consumer = Consumer(
                {
                    "bootstrap.servers": bootstrap,
                    "group.id": f"watermarks-{uuid.uuid4().hex[:8]}",
                    "isolation.level": isolation,
                }
            )
            WATERMARKS[isolation] = consumer
        for partition in range(partitions):
            try:
                _low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), 2)
            except KafkaException:
                return 0
            total += sign * high
    return total


WATERMARKS: dict[str, Consumer] = {}


def query_id(checkpoint: Path) -> str:
    import json

    return json.loads((checkpoint / "metadata").read_text())["id"]


def test_exactly_once_through_leader_and_driver_kills(
    cluster_factory: Callable[..., Any], tmp_path: Path
) -> None:
    started = time.monotonic()
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    bootstrap = cluster.bootstrap
    total, per_batch, slots = 800, 100, 3
    create_topics(bootstrap, {"in": slots, "out": 3}, 3)
    produce_numbers(bootstrap, "in", range(total), slots)
    checkpoint = tmp_path / "checkpoint"
    args = [
        "--bootstrap", bootstrap, "--checkpoint", str(checkpoint),
        "--source", "in", "--sink", "out", "--max-per-trigger", str(per_batch),
        "--temp-dir", str(tmp_path / "spark-tmp"),
    ]  # fmt: skip
    logs: list[Path] = []
    drivers: list[Driver] = []
    kills: list[str] = []

    def start() -> Driver:
        logs.append(tmp_path / f"driver-{len(logs) + 1}.log")
        drivers.append(Driver(args, logs[-1]))
        return drivers[-1]

    def committed() -> set[int]:
        """The batches Spark's commit log has (the query's own progress)."""
        return batch_files(checkpoint, "commits")

    def progressed(driver: Driver, count: int) -> Callable[[], bool]:
        def check() -> bool:
            if not driver.running():
                raise AssertionError(f"the driver exited early:\n{tail(logs)}")
            return len(committed()) >= count

        return check

    markers: MarkerWatch | None = None
    try:
        # Run 1: SIGKILL the leader of out-0 once two batches are done (rlogd restarts it), and
        # let the query go on through the leader change.
        driver = start()
        wait_until("2 committed batches", progressed(driver, 2), 180)
        victim = partition_leader(bootstrap, "out", 0)
        cluster.chaos("kill", f"broker-{victim}")
        kills.append(f"broker-{victim}, leader of out-0, after batch {max(committed())}")
        wait_until("a batch after the broker kill", progressed(driver, len(committed()) + 1), 180)

        # SIGKILL the driver after some task committed batch b in Kafka and before Spark wrote
        # b to its commit log: the restarted query replays b and that task must skip it.
        markers = MarkerWatch(bootstrap, "out", query_id(checkpoint), slots)

        ahead: list[int] = []

        def sink_ahead_of_spark() -> bool:
            if not driver.running():
                raise AssertionError(f"the driver exited early:\n{tail(logs)}")
            in_kafka = markers.batches_done()  # markers first: the commit log only grows
            done = committed()
            ahead[:] = [n - 1 for n in in_kafka if n > 0 and n - 1 not in done]
            return bool(ahead)

        wait_until("a batch the sink committed and Spark not yet", sink_ahead_of_spark, 120, 0)
        driver.kill()
        # Spark may have recorded the batch between the check and the kill (rarely): then
        # nothing is replayed, and no skip is expected.
        replay_expected = not set(ahead) <= committed()
        kills.append(
            f"driver after the sink committed batch {max(ahead)} (replay expected: "
            f"{replay_expected})"
        )

        # Run 2: once it has a new batch done, SIGKILL it again while a task's transaction is
        # open with records in `out` (the LSO behind the high watermark), if that is seen within
        # a minute; else at a random point of a batch in flight.
        driver = start()
        wait_until("a batch in run 2", progressed(driver, len(committed()) + 1), 240)
        last = max(committed())
        try:
            wait_until("an open transaction", lambda: open_records(bootstrap, "out", 3) > 0, 60, 0)
            when = "with a transaction open"
        except AssertionError:
            wait_until(
                "a batch in flight in run 2",
                lambda: progressed(driver, 0)() and max(batch_files(checkpoint, "offsets")) > last,
                120,
                0.02,
            )
            time.sleep(random.uniform(0.2, 1.5))
            when = "at a random point"
        driver.kill()
        kills.append(f"driver during batch {max(batch_files(checkpoint, 'offsets'))} {when}")

        # The last run goes to the end (Trigger.AvailableNow); a failed run is restarted.
        for _ in range(3):
            driver = start()
            remaining = TEST_DEADLINE_S - (time.monotonic() - started)
            if driver.wait(max(30.0, min(DRIVER_TIMEOUT_S, remaining))) == 0:
                break
        else:
            raise AssertionError(f"the driver kept failing:\n{tail(logs)}")
    finally:
        if markers is not None:
            markers.close()
        while WATERMARKS:
            WATERMARKS.popitem()[1].close()
        for each in drivers:
            each.kill()

    got = numbers(read_all(bootstrap, "out", 3, "read_committed"))
    # What happened goes with a failure: the kills, and where the drivers' logs are.
    happened = f"kills: {kills}; driver logs: {[str(p) for p in logs]}"
    duplicates = len(got) - len(set(got))
    assert not duplicates, f"duplicates: {duplicates} of {len(got)}; {happened}"
    missing = sorted(set(range(total)) - set(got))
    assert got == list(range(total)), f"missing: {missing[:20]}, order: {got[:20]}; {happened}"
    # The first driver kill left a batch that run 2 replayed: at least one task skipped it.
    skips = sum(p.read_text(errors="replace").count("a replay, writing nothing") for p in logs)
    assert skips >= 1 or not replay_expected, f"no replayed task skipped its batch: {kills}"
    aborted = len(read_all(bootstrap, "out", 3, "read_uncommitted")) - total
    print(
        f"exactly-once failover: {total} records in {max(committed()) + 1} batches; kills: "
        f"{kills}; {skips} replayed tasks skipped, {aborted} records of aborted transactions in "
        f"the log, {len(drivers)} driver runs, {time.monotonic() - started:.1f} s"
    )


def tail(logs: list[Path], lines: int = 30) -> str:
    if not logs:
        return ""
    text = logs[-1].read_text(errors="replace").splitlines()
    return "\n".join(text[-lines:])


# ---- the driver script ------------------------------------------------------------------------


def driver_main(argv: list[str] | None = None) -> int:
    """Read `source` from the beginning and write it to `sink` exactly-once, checkpointed, with
    Trigger.AvailableNow (its stand-in before PySpark 4.2, streaming_support.py): exits 0 once
    everything in `source` when it started is written."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--source", required=True)
    parser.add_argument("--sink", required=True)
    parser.add_argument("--max-per-trigger", type=int, required=True)
    parser.add_argument("--temp-dir", required=True, help="Spark's and the JVM's scratch files")
    args = parser.parse_args(argv)
    Path(args.temp_dir).mkdir(parents=True, exist_ok=True)

    from pyspark.sql import SparkSession

    from rlog.spark import register

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2,4]")  # 2 cores, a task may fail 3 times
        .appName("rlog-exactly-once-driver")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        # A killed driver's JVM cannot clean up: its scratch files stay in the test's directory.
        .config("spark.local.dir", args.temp_dir)
        .config("spark.driver.extraJavaOptions", f"-Djava.io.tmpdir={args.temp_dir}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    writer = (
        spark.readStream.format("rlog")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.source)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(args.max_per_trigger))
        .load()
        .selectExpr("key", "value")
        .writeStream.format("rlog")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.sink)
        .option("exactlyOnce", "true")
        .option("checkpointLocation", args.checkpoint)
    )
    query = start_query(writer)
    print(f"query {query.id} run {query.runId} started", flush=True)
    finish(query, None)
    failure = query.exception()
    print(f"query finished: {failure or 'ok'}", flush=True)
    spark.stop()
    return 1 if failure else 0


if __name__ == "__main__":
    sys.exit(driver_main())
