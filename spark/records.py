"""Executor side of reading: one offset range fetched with assign(), turned into Arrow batches.

Shared by the batch and the stream reader; runs in Spark's Python workers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, TopicPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from .options import ReadOptions, consumer_config
from .planning import OffsetRange, RlogDataLossError

# Rows per Arrow batch handed to Spark (Spark's own default arrow batch size).
ROWS_PER_BATCH = 10_000
# Messages asked of librdkafka per consume() call.
MESSAGES_PER_CONSUME = 5_000

HEADERS_FIELD = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka-source schema, column for column."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(HEADERS_FIELD)
    return StructType(fields)


def arrow_schema(schema: StructType) -> pa.Schema:
    from pyspark.sql.pandas.types import to_arrow_schema

    try:
        return to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # pyspark 4.0's to_arrow_schema has no timezone argument
        return to_arrow_schema(schema)


# confluent-kafka timestamp types -> Kafka's TimestampType ids, as Spark reports them.
TIMESTAMP_TYPES = {0: -1, 1: 0, 2: 1}


class _Columns:
    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.clear()

    def clear(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps_us: list[int | None] = []
        self.timestamp_types: list[int] = []
        self.headers: list[list[dict[str, object]] | None] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, message: object) -> None:
        self.keys.append(message.key())  # type: ignore[attr-defined]
        self.values.append(message.value())  # type: ignore[attr-defined]
        self.offsets.append(message.offset())  # type: ignore[attr-defined]
        kind, timestamp_ms = message.timestamp()  # type: ignore[attr-defined]
        self.timestamps_us.append(None if kind == 0 else timestamp_ms * 1000)
        self.timestamp_types.append(TIMESTAMP_TYPES.get(kind, -1))
        if self.include_headers:
            raw = message.headers()  # type: ignore[attr-defined]
            self.headers.append([{"key": k, "value": v} for k, v in raw] if raw else [])

    def batch(self, schema: pa.Schema, topic: str, partition: int) -> pa.RecordBatch:
        count = len(self)
        arrays = [
            pa.array(self.keys, type=schema.field("key").type),
            pa.array(self.values, type=schema.field("value").type),
            pa.array([topic] * count, type=schema.field("topic").type),
            pa.array([partition] * count, type=schema.field("partition").type),
            pa.array(self.offsets, type=schema.field("offset").type),
            pa.array(self.timestamps_us, type=schema.field("timestamp").type),
            pa.array(self.timestamp_types, type=schema.field("timestampType").type),
        ]
        if self.include_headers:
            arrays.append(pa.array(self.headers, type=schema.field("headers").type))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_range(
    options: ReadOptions, schema: StructType, piece: OffsetRange
) -> Iterator[pa.RecordBatch]:
    """Every record of [from_offset, until_offset), in offset order, as Arrow batches."""
    if piece.until_offset <= piece.from_offset:
        return
    target = arrow_schema(schema)
    columns = _Columns(include_headers="headers" in schema.fieldNames())
    consumer = Consumer(consumer_config(options.client_config))
    try:
        consumer.assign([TopicPartition(piece.topic, piece.partition, piece.from_offset)])
        expected = piece.from_offset  # next offset we have not seen
        deadline = time.monotonic() + options.poll_timeout_ms / 1000
        while expected < piece.until_offset:
            messages = consumer.consume(num_messages=MESSAGES_PER_CONSUME, timeout=0.5)
            if not messages and time.monotonic() > deadline:
                raise TimeoutError(
                    f"no records from {piece} within kafkaConsumer.pollTimeoutMs="
                    f"{options.poll_timeout_ms}; stuck before offset {expected}"
                )
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        # The log ends (high watermark) at message.offset().
                        if message.offset() < piece.until_offset:
                            _data_lost(
                                options,
                                f"{piece}: the log ends at {message.offset()}, before "
                                f"{piece.until_offset}",
                            )
                        expected = piece.until_offset
                        break
                    raise RuntimeError(f"reading {piece}: {error}")
                offset = message.offset()
                if offset >= piece.until_offset:
                    expected = piece.until_offset
                    break
                if offset > expected and expected == piece.from_offset:
                    # The first record is later than asked: earlier ones were deleted.
                    # (Later gaps are compaction or control records, which is not data loss.)
                    _data_lost(options, f"{piece}: records before offset {offset} are gone")
                expected = offset + 1
                columns.add(message)
                if len(columns) >= ROWS_PER_BATCH:
                    yield columns.batch(target, piece.topic, piece.partition)
                    columns.clear()
            if messages:
                deadline = time.monotonic() + options.poll_timeout_ms / 1000
        if len(columns):
            yield columns.batch(target, piece.topic, piece.partition)
    finally:
        consumer.close()


def _data_lost(options: ReadOptions, message: str) -> None:
    if options.fail_on_data_loss:
        raise RlogDataLossError(
            f"{message}. Some data may have been lost; set failOnDataLoss=false to continue."
        )
