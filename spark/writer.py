"""Write: each task produces its rows with an idempotent acks=all producer.

A task reports success (its commit message) only after flush() and after every delivery report
came back without error; otherwise it raises, Spark fails the task and never sees a partial
success. Records are visible as soon as a task writes them (rlog has no transactions yet), so a
job that fails after some tasks succeeded leaves those tasks' records in the topic, as Spark's
Kafka sink does.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import KafkaError, Producer
from pyspark.sql import Row
from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from .options import RlogOptionError, WriteOptions

# How long a task waits for its last deliveries before failing.
FLUSH_TIMEOUT_S = 60.0
SINK_COLUMNS = ("key", "value", "topic", "partition", "headers")


@dataclass
class RlogCommitMessage(WriterCommitMessage):
    records: int


def check_columns(options: WriteOptions, schema: StructType) -> None:
    names = schema.fieldNames()
    if "value" not in names:
        raise RlogOptionError(f"the rlog sink needs a 'value' column; the data has {names}")
    if "topic" not in names and not options.topic:
        raise RlogOptionError(
            "no topic to write to: set option 'topic' or give the data a 'topic' column"
        )


def _bytes(value: object, column: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, bytearray):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8")
    raise RlogOptionError(f"column '{column}' must be string or binary, got {type(value).__name__}")


def _headers(value: object) -> list[tuple[str, bytes | None]] | None:
    if not value:
        return None
    return [(header["key"], _bytes(header["value"], "headers.value")) for header in value]


def producer_config(options: WriteOptions) -> dict[str, object]:
    config: dict[str, object] = {"linger.ms": 5}
    config.update(options.client_config)
    # Not overridable: each task's writes must be idempotent and fully acknowledged.
    config["enable.idempotence"] = True
    config["acks"] = "all"
    return config


def write_rows(options: WriteOptions, rows: Iterator[Row]) -> RlogCommitMessage:
    producer = Producer(producer_config(options))
    errors: list[KafkaError] = []

    def delivered(error: KafkaError | None, _message: object) -> None:
        if error is not None:
            errors.append(error)

    sent = 0
    for row in rows:
        fields = row.asDict() if hasattr(row, "asDict") else dict(row)
        topic = fields.get("topic") or options.topic
        if not topic:
            raise RlogOptionError("a row has a null 'topic' and no option 'topic' is set")
        extra: dict[str, object] = {}
        if fields.get("partition") is not None:
            extra["partition"] = int(fields["partition"])
        headers = _headers(fields.get("headers"))
        if headers:
            extra["headers"] = headers
        while True:
            try:
                producer.produce(
                    topic,
                    value=_bytes(fields.get("value"), "value"),
                    key=_bytes(fields.get("key"), "key"),
                    on_delivery=delivered,
                    **extra,
                )
                break
            except BufferError:  # local queue full: let deliveries drain, then retry
                producer.poll(0.1)
        producer.poll(0)
        sent += 1
        if errors:
            break
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    if errors:
        raise RuntimeError(f"{len(errors)} of {sent} records were not written; first: {errors[0]}")
    if remaining:
        raise RuntimeError(f"{remaining} records still undelivered after {FLUSH_TIMEOUT_S} s")
    return RlogCommitMessage(records=sent)


class RlogWriter(DataSourceWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_columns(options, schema)
        self.options = options

    def write(self, iterator: Iterator[Row]) -> RlogCommitMessage:
        return write_rows(self.options, iterator)


class RlogStreamWriter(DataSourceStreamWriter):
    def __init__(self, options: WriteOptions, schema: StructType) -> None:
        check_columns(options, schema)
        self.options = options

    def write(self, iterator: Iterator[Row]) -> RlogCommitMessage:
        return write_rows(self.options, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: every task's records were acknowledged before it reported success."""

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo without transactions; failed tasks already raised."""
