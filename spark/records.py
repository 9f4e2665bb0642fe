"""Executor side of reading: one offset range fetched from its leader, turned into Arrow batches.

Shared by the batch and the stream reader; runs in Spark's Python workers.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pyarrow as pa
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

from .batch_decode import arrow_batch, batches_in, chunk_bounds, decode, visible_batches
from .kafka_wire import (
    OFFSET_OUT_OF_RANGE,
    READ_COMMITTED,
    FetchedPartition,
    FetchSettings,
    KafkaWireError,
    PartitionClient,
    RetriableWireError,
    retry_pause,
)
from .options import ReadOptions
from .planning import OffsetRange, RlogDataLossError, metadata_consumer, watermarks

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


# Most rows in one Arrow batch handed to Spark, and most key and value bytes (Arrow's binary
# offsets are 32-bit).
ROWS_PER_BATCH = 65_536
BYTES_PER_BATCH = 256 << 20


def read_range(
    options: ReadOptions, schema: StructType, piece: OffsetRange
) -> Iterator[pa.RecordBatch]:
    """Every record of [from_offset, until_offset), in offset order, as Arrow batches.

    The batches are fetched raw from the partition's leader and turned into columns in bulk
    (batch_decode.py). Offsets the log no longer has are data loss (failOnDataLoss); gaps inside
    the range (compaction, transaction markers, aborted transactions) are not."""
    if piece.until_offset <= piece.from_offset:
        return
    target = arrow_schema(schema)
    settings = FetchSettings.from_config(options.client_config)
    client = PartitionClient(settings, piece.topic, piece.partition)
    position = piece.from_offset  # the next offset to read
    deadline = time.monotonic() + options.poll_timeout_ms / 1000
    failures = 0
    try:
        while position < piece.until_offset:
            try:
                if client.in_flight == 0:
                    client.request(position)
                fetched = client.answer()
            except RetriableWireError as error:
                if time.monotonic() > deadline:
                    raise TimeoutError(
                        f"no records from {piece} within kafkaConsumer.pollTimeoutMs="
                        f"{options.poll_timeout_ms}; stuck before offset {position}: {error}"
                    ) from error
                retry_pause(failures)
                failures += 1
                continue
            failures = 0
            if fetched.error == OFFSET_OUT_OF_RANGE:
                client.close()
                position = _out_of_range(options, piece, position)
                continue
            if fetched.error != 0:
                raise KafkaWireError(f"fetching {piece} at {position}: Kafka error {fetched.error}")
            buf = np.frombuffer(fetched.frame, np.uint8)
            batches = batches_in(buf, fetched.records_start, fetched.records_end)
            if len(batches) == 0:
                if fetched.records_end > fetched.records_start:
                    raise KafkaWireError(
                        f"a record batch of {piece} at {position} is larger than "
                        "kafka.max.partition.fetch.bytes; raise it"
                    )
                position = _at_log_end(options, piece, position, fetched, deadline)
                continue
            deadline = time.monotonic() + options.poll_timeout_ms / 1000
            next_position = max(position, int(batches.next_offsets[-1]))
            if next_position < piece.until_offset:
                client.request(next_position)  # the broker reads on while we decode
            # Aborted transactions are hidden from read_committed readers only.
            aborted = fetched.aborted if settings.isolation_level == READ_COMMITTED else []
            batches = batches.take(visible_batches(batches, buf, aborted))
            records = decode(buf, batches, position, piece.until_offset)
            for start, stop in chunk_bounds(records, ROWS_PER_BATCH, BYTES_PER_BATCH):
                yield arrow_batch(records.slice(start, stop), target, piece.topic, piece.partition)
            position = next_position
    finally:
        client.close()


def _out_of_range(options: ReadOptions, piece: OffsetRange, position: int) -> int:
    """Where to go on when the leader says `position` is outside its log."""
    with metadata_consumer(options) as consumer:
        ((low, high),) = watermarks(consumer, [(piece.topic, piece.partition)]).values()
    if position < low:
        _data_lost(options, f"{piece}: records before offset {low} are gone")
        return low
    if position >= high:
        _data_lost(options, f"{piece}: the log ends at {high}, before {piece.until_offset}")
        return piece.until_offset
    return position  # the log moved while we asked (a new leader); read again


def _at_log_end(
    options: ReadOptions,
    piece: OffsetRange,
    position: int,
    fetched: FetchedPartition,
    deadline: float,
) -> int:
    """Nothing to read at `position`, yet the range goes on: truncated, or an open transaction."""
    if position >= fetched.high_watermark:
        _data_lost(
            options,
            f"{piece}: the log ends at {fetched.high_watermark}, before {piece.until_offset}",
        )
        return piece.until_offset
    # read_committed stops at the last stable offset: a transaction is still open. Wait for it
    # (each fetch already long-polls) as long as kafkaConsumer.pollTimeoutMs allows.
    if time.monotonic() > deadline:
        raise TimeoutError(
            f"no records from {piece} within kafkaConsumer.pollTimeoutMs="
            f"{options.poll_timeout_ms}; stuck before offset {position} (last stable offset "
            f"{fetched.last_stable_offset}: a transaction is open)"
        )
    return position


def _data_lost(options: ReadOptions, message: str) -> None:
    if options.fail_on_data_loss:
        raise RlogDataLossError(
            f"{message}. Some data may have been lost; set failOnDataLoss=false to continue."
        )
