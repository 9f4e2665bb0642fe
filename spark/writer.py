"""Write: each task produces its rows with an idempotent acks=all producer, or, for a streaming
write with `exactlyOnce`, in one Kafka transaction that a replay of its micro-batch skips.

At-least-once (the default, as Spark's Kafka sink)
--------------------------------------------------
A task reports success (its commit message) only after flush() and after every delivery report
came back without error; otherwise it raises, Spark fails the task and never sees a partial
success. Records are visible as soon as a task writes them, so a job that fails after some tasks
succeeded leaves those tasks' records in the topic, and a micro-batch that Spark runs again (a
retried task, a query restarted from its checkpoint before the batch was marked done) writes its
records again.

How rows reach the producer
---------------------------
Spark's Kafka-sink columns: `value` (string or binary, required), `key` (string or binary),
`topic` (string; used only without option `topic`, which overrides it as in Spark; a null is
then an error), `partition` (int; null or absent: librdkafka's partitioner), `headers`
(array<struct<key:string,value:binary>>); other columns are ignored. The types are checked on
the driver when the write is planned (`check_columns`).

Where PySpark offers them (`DataSourceArrowWriter`, 4.0+; `DataSourceStreamArrowWriter`, 4.1+),
a task gets Arrow record batches, not Rows. Each batch becomes one `Chunk` of Python lists, a
column at a time (`Array.to_pylist()` in C++; string columns are first cast to binary, which
reuses their buffers), and the produce loop does nothing per record but call `produce()`. Under
older PySpark the Row writers build the same chunks from Rows. Delivery reports come only for
failed records (`delivery.report.only.error`), so the producer calls no Python per delivered
record; the task polls once per chunk and stops at the first failure.

Exactly-once (`.option("exactlyOnce", "true")` on `writeStream`)
----------------------------------------------------------------
Every task of micro-batch B writes all its rows in ONE Kafka transaction of its own producer,
`transactional.id = f"{prefix}-{queryId}-{partitionId}"` (prefix: option `transactionalIdPrefix`,
default `rlog-spark`; queryId: the streaming query's id, which Spark keeps in the checkpoint, so
it survives restarts; partitionId: the task's Spark partition, its *slot*). The task:

1. `init_transactions()`: the coordinator bumps the producer epoch of that transactional id, so
   any earlier attempt of the same slot (a failed task attempt still running, a speculative
   copy, a task of a driver that was killed) is fenced: it can no longer produce or commit, and
   its open transaction is aborted. init_transactions returns only once the previous transaction
   of the id is complete, committed or aborted, so what the next step reads is settled.
2. Reads the committed offset of the marker group (group id = the transactional id, topic-
   partition = (marker topic, 0), the marker topic being option `markerTopic`, else `topic`).
   That offset is "the next batch this slot has to write": if it is > B, batch B was already
   committed by this slot: Spark is replaying it (its driver died after the task committed and
   before Spark's commit log recorded the batch, or the job was retried). The task then writes
   nothing and reports `skipped`.
3. Otherwise: begin_transaction, produce the rows, `send_offsets_to_transaction` of offset B + 1
   (metadata `spark batch B`) for the marker group, commit_transaction. The records and the marker
   commit or abort together: a read_committed consumer sees each slot's rows of batch B once.

A task with no rows writes nothing and opens no transaction: there is nothing to duplicate.

Where the pieces come from: PySpark's `DataSourceStreamWriter.write()` runs on executors and is
not given the batch id (only the driver-side `commit(messages, batchId)` is). The task reads it,
and the query id, from the Spark local properties that the micro-batch engine sets on the jobs
it runs and that every task carries: `streaming.sql.batchId` and `sql.streaming.queryId`
(`TaskContext.get().getLocalProperty(...)`; `partitionId()` gives the slot). The driver-side
`commit()` checks that every task saw the batch id Spark commits.

Why one marker group per slot and partition 0 of an existing topic: Kafka (and rlog) refuse
offset commits for topic-partitions that do not exist, and only one producer may own a group's
pending offsets for a partition, so each slot needs its own group for the same partition; one
group per transactional id keeps them one-to-one. The "offset" is a batch number, not a position
in that partition: nobody should consume with these groups (`rlog group list` shows them).

What exactly-once rests on, and its limits:

- A replayed batch must put the same rows in the same Spark partitions. Spark replays a batch
  with the offsets its offset log recorded, and the rlog source plans the partitions of a batch
  from those offsets alone, so a stateless query reading rlog (or any deterministic source)
  does; stateful queries pin their shuffle partitions in the checkpoint. A plan that splits the
  same batch differently on replay (a changed `maxRecordsPerPartition`, a non-deterministic
  repartition, a changed query) voids the guarantee for that one batch.
- Visibility is per task, not per batch: read_committed readers see a task's rows when that task
  commits, so a batch can be partly visible while its other tasks run or are retried (each slot
  still ends with its rows exactly once). Spark's `abort()` cannot undo committed tasks.
- The marker groups and transactional ids belong to one checkpoint: restarting from the same
  checkpoint resumes them; a new checkpoint is a new query id, hence new slots. To reprocess
  batches on purpose from a rewound checkpoint, use a new `transactionalIdPrefix`.
- Micro-batch triggers only (not continuous processing), and streaming writes only: a batch
  `df.write` has no batch id to recognise a replay by.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import pyspark.sql.datasource as spark_datasource
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from pyspark import TaskContext
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    ByteType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from ..kafka_calls import call_with_deadline
from .options import RlogOptionError, WriteOptions

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

# How long a task waits for its last deliveries before failing.
FLUSH_TIMEOUT_S = 60.0
# How long one transactional step (init, offset read, send offsets, commit) may keep retrying.
REQUEST_TIMEOUT_S = 60.0
# Rows the Row writers gather into one chunk (Spark's Arrow batches are 10,000 rows by default).
ROWS_PER_CHUNK = 10_000
# librdkafka's "no partition chosen": its partitioner decides.
ANY_PARTITION = -1
NULL_TOPIC = "a row has a null 'topic' and no option 'topic' is set"

# Producer settings for throughput, which a `kafka.*` option may override: batches of up to
# 100,000 records or 1 MB after at most 5 ms, a local queue deep enough that produce() seldom
# waits, and delivery reports for failed records only (no Python call per delivered record).
THROUGHPUT_DEFAULTS: dict[str, object] = {
    "linger.ms": 5,
    "batch.size": 1_000_000,
    "batch.num.messages": 100_000,
    "queue.buffering.max.messages": 1_000_000,
    "delivery.report.only.error": True,
}

# Local properties Spark's micro-batch engine sets on the jobs of a batch; tasks inherit them.
QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
CONTINUOUS_PROPERTY = "__is_continuous_processing"

# Errors of a group-coordinator request worth asking again (the coordinator is moving or loading).
_RETRY_CODES = frozenset(
    {
        KafkaError.NOT_COORDINATOR,
        KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        KafkaError.COORDINATOR_NOT_AVAILABLE,
        KafkaError.UNSTABLE_OFFSET_COMMIT,
        KafkaError._TIMED_OUT,
        KafkaError._TRANSPORT,
        KafkaError._WAIT_COORD,
    }
)


@dataclass
class RlogCommitMessage(WriterCommitMessage):
    records: int
    # Exactly-once writes only: the batch and slot the task wrote, and whether it found the batch
    # already committed (a replay) and wrote nothing.
    batch_id: int | None = None
    partition: int | None = None
    skipped: bool = False


@dataclass(frozen=True)
class TaskSlot:
    """What identifies a task's transaction: the query, the micro-batch, the Spark partition."""

    query_id: str
    batch_id: int
    partition: int


# --- columns ----------------------------------------------------------------------------------

_INTEGER_TYPES = (IntegerType, LongType, ShortType, ByteType)


def _is_text_or_binary(data_type: DataType) -> bool:
    return isinstance(data_type, (StringType, BinaryType))


def _is_headers(data_type: DataType) -> bool:
    if not isinstance(data_type, ArrayType) or not isinstance(data_type.elementType, StructType):
        return False
    element = data_type.elementType
    if element.fieldNames() != ["key", "value"]:
        return False
    return isinstance(element["key"].dataType, StringType) and _is_text_or_binary(
        element["value"].dataType
    )


_COLUMN_RULES: dict[str, tuple[Callable[[DataType], bool], str]] = {
    "key": (_is_text_or_binary, "string or binary"),
    "value": (_is_text_or_binary, "string or binary"),
    "topic": (lambda t: isinstance(t, StringType), "string"),
    "partition": (lambda t: isinstance(t, _INTEGER_TYPES), "int"),
    "headers": (_is_headers, "array<struct<key:string,value:binary>>"),
}


def check_columns(options: WriteOptions, schema: StructType) -> None:
    """Spark's Kafka-sink columns and types; checked on the driver, before any task runs."""
    names = schema.fieldNames()
    if "value" not in names:
        raise RlogOptionError(f"the rlog sink needs a 'value' column; the data has {names}")
    if "topic" not in names and not options.topic:
        raise RlogOptionError(
            "no topic to write to: set option 'topic' or give the data a 'topic' column"
        )
    for name, (fits, wanted) in _COLUMN_RULES.items():
        if name in names and not fits(schema[name].dataType):
            raise RlogOptionError(
                f"column '{name}' must be {wanted}, got {schema[name].dataType.simpleString()}"
            )


class Chunk(NamedTuple):
    """Records ready for produce(), a column at a time. `topics`, `keys`, `partitions` and
    `headers` are None when every record has no key, the same topic (`topic`), no partition or
    no headers."""

    topic: str | None
    topics: list[str] | None
    values: list[bytes | None]
    keys: list[bytes | None] | None
    partitions: list[int] | None
    headers: list[list[tuple[str, bytes | None]] | None] | None


def _binary_list(column: pa.Array, name: str) -> list[bytes | None]:
    """A string or binary Arrow column as bytes; strings are cast first, reusing the buffers."""
    import pyarrow as pa

    if pa.types.is_string(column.type):
        column = column.cast(pa.binary())
    elif pa.types.is_large_string(column.type):
        column = column.cast(pa.large_binary())
    elif not (pa.types.is_binary(column.type) or pa.types.is_large_binary(column.type)):
        raise RlogOptionError(f"column '{name}' must be string or binary, got {column.type}")
    return column.to_pylist()


def _header_lists(column: pa.Array) -> list[list[tuple[str, bytes | None]] | None] | None:
    rows = column.to_pylist()
    converted = [
        [(h["key"], _bytes(h["value"], "headers.value")) for h in headers] if headers else None
        for headers in rows
    ]
    return converted if any(converted) else None


def arrow_chunk(batch: pa.RecordBatch, topic_option: str | None) -> Chunk:
    """One Arrow record batch of the sink's columns, converted a column at a time. Option
    `topic` overrides the `topic` column, as in Spark's Kafka sink."""
    import pyarrow.compute as pc

    names = batch.schema.names
    topic, topics = topic_option, None
    if topic_option is None and "topic" in names and batch.num_rows:
        column = batch.column("topic")
        if column.null_count:
            raise RlogOptionError(NULL_TOPIC)
        if pc.count_distinct(column).as_py() == 1:
            topic = column[0].as_py()  # one topic for the whole batch: the fast loop
        else:
            topics = column.to_pylist()
    keys = None
    if "key" in names and batch.column("key").null_count < batch.num_rows:
        keys = _binary_list(batch.column("key"), "key")
    partitions = None
    if "partition" in names and batch.column("partition").null_count < batch.num_rows:
        partitions = pc.fill_null(batch.column("partition"), ANY_PARTITION).to_pylist()
    headers = None
    if "headers" in names and batch.column("headers").null_count < batch.num_rows:
        headers = _header_lists(batch.column("headers"))
    values = _binary_list(batch.column("value"), "value")
    return Chunk(topic, topics, values, keys, partitions, headers)


def _bytes(value: object, column: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise RlogOptionError(f"column '{column}' must be string or binary, got {type(value).__name__}")


def _row_headers(value: object) -> list[tuple[str, bytes | None]] | None:
    if not value:
        return None
    return [(header["key"], _bytes(header["value"], "headers.value")) for header in value]


def _row_fields(row: object) -> Mapping[str, Any]:
    return row.asDict() if isinstance(row, Row) else dict(row)  # type: ignore[call-overload]


def row_chunks(rows: Iterable[object], topic_option: str | None) -> Iterator[Chunk]:
    """Rows (Spark Rows or mappings) gathered into chunks of ROWS_PER_CHUNK; the fallback where
    PySpark hands the writer Rows instead of Arrow batches."""
    rows = iter(rows)
    while batch := list(itertools.islice(rows, ROWS_PER_CHUNK)):
        topics: list[str] = []
        values: list[bytes | None] = []
        keys: list[bytes | None] = []
        partitions: list[int] = []
        headers: list[list[tuple[str, bytes | None]] | None] = []
        for row in batch:
            fields = _row_fields(row)
            topic = topic_option or fields.get("topic")
            if not topic:
                raise RlogOptionError(NULL_TOPIC)
            topics.append(topic)
            values.append(_bytes(fields.get("value"), "value"))
            keys.append(_bytes(fields.get("key"), "key"))
            partition = fields.get("partition")
            partitions.append(ANY_PARTITION if partition is None else int(partition))
            headers.append(_row_headers(fields.get("headers")))
        yield Chunk(None, topics, values, keys, partitions, headers)


# --- producing --------------------------------------------------------------------------------


def producer_config(options: WriteOptions, errors: list[KafkaError]) -> dict[str, object]:
    """The task's producer: throughput defaults, then `kafka.*`, then what is not overridable.
    Failed deliveries are appended to `errors`."""

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            errors.append(error)

    config: dict[str, object] = dict(THROUGHPUT_DEFAULTS)
    config.update(options.client_config)
    # Not overridable: each task's writes must be idempotent and fully acknowledged.
    config["enable.idempotence"] = True
    config["acks"] = "all"
    config["on_delivery"] = delivered
    return config


def _produce_when_room(
    producer: Producer,
    topic: str,
    value: bytes | None,
    key: bytes | None,
    partition: int,
    headers: list[tuple[str, bytes | None]] | None,
) -> None:
    """produce() after the local queue was full: let deliveries drain, then try again."""
    while True:
        producer.poll(0.1)
        try:
            producer.produce(topic, value, key, partition, headers=headers)
            return
        except BufferError:
            continue


def produce_chunk(producer: Producer, chunk: Chunk) -> int:
    """Hand a chunk's records to the producer; how many."""
    produce = producer.produce
    values = chunk.values
    if not values:
        return 0
    keys = chunk.keys if chunk.keys is not None else itertools.repeat(None)
    if chunk.topics is None and chunk.partitions is None and chunk.headers is None:
        topic = chunk.topic
        assert topic is not None, "arrow_chunk and row_chunks name a topic"
        for value, key in zip(values, keys, strict=False):
            try:
                produce(topic, value, key)
            except BufferError:
                _produce_when_room(producer, topic, value, key, ANY_PARTITION, None)
        return len(values)
    records = zip(
        chunk.topics if chunk.topics is not None else itertools.repeat(chunk.topic),
        values,
        keys,
        chunk.partitions if chunk.partitions is not None else itertools.repeat(ANY_PARTITION),
        chunk.headers if chunk.headers is not None else itertools.repeat(None),
        strict=False,  # the repeats are endless; the lists are as long as `values`
    )
    for topic, value, key, partition, headers in records:
        try:
            if headers is None:
                produce(topic, value, key, partition)
            else:
                produce(topic, value, key, partition, headers=headers)
        except BufferError:
            _produce_when_room(producer, topic, value, key, partition, headers)
    return len(values)


def produce_chunks(producer: Producer, chunks: Iterable[Chunk], errors: list[KafkaError]) -> int:
    """Produce every chunk, serving delivery reports (failures only) once per chunk and stopping
    at the first failure; how many records were handed over."""
    sent = 0
    for chunk in chunks:
        sent += produce_chunk(producer, chunk)
        producer.poll(0)
        if errors:
            break
    return sent


def _flush(producer: Producer, errors: list[KafkaError], sent: int) -> None:
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if errors:
        raise RuntimeError(f"{len(errors)} of {sent} records were not written; first: {errors[0]}")
    if remaining:
        raise RuntimeError(f"{remaining} records still undelivered after {FLUSH_TIMEOUT_S} s")


def write_chunks(options: WriteOptions, chunks: Iterable[Chunk]) -> RlogCommitMessage:
    """At-least-once: produce every record, then succeed only if every one was acknowledged."""
    errors: list[KafkaError] = []
    producer = Producer(producer_config(options, errors))
    sent = produce_chunks(producer, chunks, errors)
    _flush(producer, errors, sent)
    return RlogCommitMessage(records=sent)


def write_rows(options: WriteOptions, rows: Iterable[object]) -> RlogCommitMessage:
    return write_chunks(options, row_chunks(rows, options.topic))


def write_arrow(options: WriteOptions, batches: Iterable[pa.RecordBatch]) -> RlogCommitMessage:
    return write_chunks(options, (arrow_chunk(b, options.topic) for b in batches))


# --- exactly once -----------------------------------------------------------------------------


def transactional_id(options: WriteOptions, slot: TaskSlot) -> str:
    """The slot's transactional id, which is also its marker group's id."""
    return f"{options.transactional_id_prefix}-{slot.query_id}-{slot.partition}"


def transactional_producer_config(
    options: WriteOptions, slot: TaskSlot, errors: list[KafkaError] | None = None
) -> dict[str, object]:
    config = producer_config(options, errors if errors is not None else [])
    return config | {"transactional.id": transactional_id(options, slot)}


def marker_consumer_config(options: WriteOptions, slot: TaskSlot) -> dict[str, object]:
    """A consumer that only reads and names the marker group; it never subscribes."""
    config: dict[str, object] = dict(options.client_config)
    config["group.id"] = transactional_id(options, slot)
    config["isolation.level"] = "read_committed"  # OffsetFetch asks for stable offsets only
    config["enable.auto.commit"] = False
    config["enable.auto.offset.store"] = False
    return config


def task_slot() -> TaskSlot:
    """The running task's slot, from the local properties of the micro-batch's job."""
    context = TaskContext.get()
    if context is None:
        raise RuntimeError("exactly-once writes run inside Spark tasks only")
    if (context.getLocalProperty(CONTINUOUS_PROPERTY) or "").lower() == "true":
        raise RlogOptionError("option 'exactlyOnce' needs a micro-batch trigger, not continuous")
    query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
    batch_id = context.getLocalProperty(BATCH_ID_PROPERTY)
    if not query_id or batch_id is None:
        raise RuntimeError(
            f"exactly-once write without Spark's {QUERY_ID_PROPERTY!r} and {BATCH_ID_PROPERTY!r} "
            "task properties: is this a micro-batch streaming query?"
        )
    return TaskSlot(query_id, int(batch_id), context.partitionId())


def _retryable(error: KafkaError) -> bool:
    return bool(error.retriable()) or error.code() in _RETRY_CODES


def _retrying(what: str, action: Callable[[], None]) -> None:
    """Run a transactional call, again while it fails with a retriable error (librdkafka's
    contract for init_transactions, send_offsets_to_transaction and commit_transaction)."""
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while True:
        try:
            action()
            return
        except KafkaException as failure:
            error = failure.args[0]
            if not _retryable(error) or error.txn_requires_abort() or error.fatal():
                raise
            if time.monotonic() >= deadline:
                raise
            log.info("%s: %s; retrying", what, error)
            time.sleep(0.2)


def committed_batches(consumer: Consumer, marker_topic: str) -> int:
    """The marker group's committed offset: how many batches (0..n-1) the slot has committed."""
    deadline = time.monotonic() + REQUEST_TIMEOUT_S
    while True:
        try:
            (got,) = consumer.committed([TopicPartition(marker_topic, 0)], REQUEST_TIMEOUT_S)
            if got.error is None:
                return max(got.offset, 0)  # OFFSET_INVALID (-1001): nothing committed yet
            failure = KafkaException(got.error)
        except KafkaException as raised:
            failure = raised
        if not _retryable(failure.args[0]) or time.monotonic() >= deadline:
            raise failure
        log.info("reading marker offsets: %s; retrying", failure.args[0])
        time.sleep(0.2)


def _abort_quietly(producer: Producer) -> None:
    """Abort after a failure; if even that fails, the next attempt's init_transactions will."""
    try:
        producer.abort_transaction(REQUEST_TIMEOUT_S)
    except KafkaException as error:
        log.warning(
            "aborting the task's transaction failed (the next attempt fences it): %s", error
        )


def write_exactly_once(
    options: WriteOptions, chunks: Iterable[Chunk], slot: TaskSlot
) -> RlogCommitMessage:
    """Write one task's records of micro-batch `slot.batch_id` in one transaction, unless the
    slot already committed that batch (see the module docstring)."""
    assert options.marker_topic is not None, "parse_write_options sets it with exactlyOnce"
    nonempty = (chunk for chunk in chunks if chunk.values)
    first = next(nonempty, None)
    if first is None:
        return RlogCommitMessage(records=0, batch_id=slot.batch_id, partition=slot.partition)
    errors: list[KafkaError] = []
    producer = Producer(transactional_producer_config(options, slot, errors))
    consumer = Consumer(marker_consumer_config(options, slot))
    try:
        # Fences every earlier producer of this slot and settles its last transaction ...
        _retrying("init_transactions", lambda: producer.init_transactions(REQUEST_TIMEOUT_S))
        # ... so the marker read now is final for it.
        done = committed_batches(consumer, options.marker_topic)
        if done > slot.batch_id:
            log.warning(
                "%s: batch %d was committed before (slot at batch %d): a replay, writing nothing",
                transactional_id(options, slot),
                slot.batch_id,
                done,
            )
            return RlogCommitMessage(
                records=0, batch_id=slot.batch_id, partition=slot.partition, skipped=True
            )
        producer.begin_transaction()
        try:
            sent = produce_chunks(producer, itertools.chain([first], nonempty), errors)
            _flush(producer, errors, sent)
            marker = TopicPartition(
                options.marker_topic, 0, slot.batch_id + 1, metadata=f"spark batch {slot.batch_id}"
            )
            group = consumer.consumer_group_metadata()
            # Bounded: librdkafka may block here forever if the group coordinator dies (see
            # rlog.kafka_calls); the task then fails and Spark's next attempt fences this one.
            call_with_deadline(
                "send_offsets_to_transaction",
                lambda: _retrying(
                    "send_offsets_to_transaction",
                    lambda: producer.send_offsets_to_transaction(
                        [marker], group, REQUEST_TIMEOUT_S
                    ),
                ),
                3 * REQUEST_TIMEOUT_S,
            )
            _retrying("commit_transaction", lambda: producer.commit_transaction(REQUEST_TIMEOUT_S))
        except BaseException:
            _abort_quietly(producer)
            raise
    finally:
        consumer.close()
    return RlogCommitMessage(records=sent, batch_id=slot.batch_id, partition=slot.partition)


def write_rows_exactly_once(
    options: WriteOptions, rows: Iterable[object], slot: TaskSlot
) -> RlogCommitMessage:
    return write_exactly_once(options, row_chunks(rows, options.topic), slot)


# --- the writers Spark calls ------------------------------------------------------------------

# PySpark hands Arrow record batches to these where it has them (batch 4.0+, streaming 4.1+).
_ArrowWriter: type | None = getattr(spark_datasource, "DataSourceArrowWriter", None)
_ArrowStreamWriter: type | None = getattr(spark_datasource, "DataSourceStreamArrowWriter", None)


def _batch_options(options: WriteOptions, schema: StructType) -> WriteOptions:
    check_columns(options, schema)
    if options.exactly_once:
        raise RlogOptionError(
            "option 'exactlyOnce' is for streaming writes (writeStream): a batch write has "
            "no micro-batch id to recognise a replay by"
        )
    return options


class RlogRowWriter(DataSourceWriter):
    """`df.write` where PySpark has no Arrow writer: rows in, chunks out."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        self.options = _batch_options(options, schema)

    def write(self, iterator: Iterator[Row]) -> RlogCommitMessage:
        return write_rows(self.options, iterator)


class _StreamCommit:
    """The driver-side end of a micro-batch, the same for the Row and the Arrow stream writer."""

    options: WriteOptions

    def _write(self, chunks: Iterable[Chunk]) -> RlogCommitMessage:
        if self.options.exactly_once:
            return write_exactly_once(self.options, chunks, task_slot())
        return write_chunks(self.options, chunks)

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to commit: every task's records were acknowledged (at-least-once) or its
        transaction committed (exactly-once) before it reported success. With exactly-once,
        check that the tasks wrote the batch Spark is committing."""
        if not self.options.exactly_once:
            return
        ours = [m for m in messages if isinstance(m, RlogCommitMessage)]
        wrong = [m for m in ours if m.batch_id is not None and m.batch_id != batchId]
        if wrong:
            raise RuntimeError(
                f"Spark commits batch {batchId} but tasks wrote it as batch {wrong[0].batch_id}: "
                "the task's batch id property is not what the rlog sink expects"
            )
        skipped = [m.partition for m in ours if m.skipped]
        if skipped:
            log.warning("batch %d: partitions %s were a replay and wrote nothing", batchId, skipped)

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: failed tasks raised (and aborted their transaction, if any); tasks
        that committed stay committed, and a rerun of the batch skips them (exactly-once)."""


class RlogRowStreamWriter(_StreamCommit, DataSourceStreamWriter):
    """`writeStream` where PySpark has no Arrow stream writer (4.0): rows in, chunks out."""

    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_columns(options, schema)
        self.options = options

    def write(self, iterator: Iterator[Row]) -> RlogCommitMessage:
        return self._write(row_chunks(iterator, self.options.topic))


if _ArrowWriter is not None:

    class RlogArrowWriter(_ArrowWriter):  # type: ignore[valid-type,misc]
        """`df.write`: Arrow record batches in."""

        def __init__(self, options: WriteOptions, schema: StructType) -> None:
            self.options = _batch_options(options, schema)

        def write(self, iterator: Iterator[pa.RecordBatch]) -> RlogCommitMessage:
            return write_arrow(self.options, iterator)


if _ArrowStreamWriter is not None:

    class RlogArrowStreamWriter(_StreamCommit, _ArrowStreamWriter):  # type: ignore[valid-type,misc]
        """`writeStream`: Arrow record batches in."""

        def __init__(self, options: WriteOptions, schema: StructType) -> None:
            check_columns(options, schema)
            self.options = options

        def write(self, iterator: Iterator[pa.RecordBatch]) -> RlogCommitMessage:
            return self._write(arrow_chunk(b, self.options.topic) for b in iterator)


def batch_writer(options: WriteOptions, schema: StructType) -> DataSourceWriter:
    """The Arrow writer where PySpark has one, else the Row writer."""
    if _ArrowWriter is not None:
        return RlogArrowWriter(options, schema)
    return RlogRowWriter(options, schema)


def stream_writer(options: WriteOptions, schema: StructType) -> DataSourceStreamWriter:
    """The Arrow stream writer where PySpark has one (4.1+), else the Row stream writer."""
    if _ArrowStreamWriter is not None:
        return RlogArrowStreamWriter(options, schema)
    return RlogRowStreamWriter(options, schema)
