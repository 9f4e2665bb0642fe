"""Batch read: plan offset ranges on the driver, read each range in a task."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import StructType

from .options import EARLIEST, LATEST, ReadOptions
from .planning import (
    OffsetRange,
    metadata_consumer,
    resolve,
    split_ranges,
    topic_partitions,
    watermarks,
)
from .records import read_range


class RlogBatchReader(DataSourceReader):
    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        with metadata_consumer(self.options) as consumer:
            keys = topic_partitions(consumer, self.options)
            marks = watermarks(consumer, keys)
            starting = resolve(
                consumer,
                self.options.starting,
                keys,
                marks,
                missing=EARLIEST,
                no_match=self.options.timestamp_strategy,
            )
            ending = resolve(consumer, self.options.ending, keys, marks, missing=LATEST)
        ranges = split_ranges(
            starting,
            ending,
            self.options.max_records_per_partition,
            self.options.min_partitions,
        )
        # Spark needs at least one partition to run a read; an empty range reads nothing.
        return ranges or [OffsetRange("", 0, 0, 0)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange), partition
        return read_range(self.options, self.schema, partition)
