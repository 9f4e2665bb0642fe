"""Streaming read: offsets are Spark's per-partition JSON, `{"topic": {"0": 42}}`.

An offset is the next record to read, so a micro-batch (start, end] reads [start, end) per
partition; restarting from a checkpoint resumes at the committed end: nothing skipped or repeated.

PySpark 4.2+ calls `latestOffset(start, limit)` with Spark's read limits and supports
Trigger.AvailableNow. PySpark 4.0/4.1 call `latestOffset()` with neither, before
`initialOffset()` on a fresh query, and run Trigger.AvailableNow as one micro-batch (Spark's
fallback for sources without it); the reader then starts from where the last planned batch
ended, or from its (memoized) initial offsets, and applies the limits from the options.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from .options import EARLIEST, ReadOptions
from .planning import (
    OffsetRange,
    Offsets,
    RlogDataLossError,
    commit_progress,
    from_json_offsets,
    metadata_consumer,
    resolve,
    split_ranges,
    to_json_offsets,
    topic_partitions,
    watermarks,
)
from .records import read_range

try:  # pyspark >= 4.2: admission control and Trigger.AvailableNow
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadLimit,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )

    ADMISSION_CONTROL = True
except ImportError:  # pyspark 4.0 / 4.1
    ADMISSION_CONTROL = False
    ReadLimit = object  # type: ignore[assignment,misc]
    ReadAllAvailable = ReadMaxRows = ReadMinRows = None  # type: ignore[assignment,misc]

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


def cap_offsets(start: Offsets, latest: Offsets, max_records: int) -> Offsets:
    """Move at most max_records past `start`, shared among partitions in proportion to their
    backlog (as Spark's Kafka source does); every partition with a backlog gets at least one
    record while the budget lasts, so a query always makes progress."""
    backlog = {key: max(0, end - start.get(key, end)) for key, end in latest.items()}
    total = sum(backlog.values())
    if total <= max_records:
        return dict(latest)
    given = {key: (lag * max_records) // total for key, lag in backlog.items()}
    spare = max_records - sum(given.values())
    for key in sorted(backlog, key=lambda k: -backlog[k]):
        if spare <= 0:
            break
        if given[key] < backlog[key]:
            given[key] += 1
            spare -= 1
    return {key: start.get(key, end) + given[key] for key, end in latest.items()}


class RlogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: ReadOptions, schema: StructType) -> None:
        self.options = options
        self.schema = schema
        self._available_now_target: Offsets | None = None
        # The first initialOffset(), returned again: pyspark 4.0 asks latestOffset() (which then
        # starts from it) before initialOffset(), and the two must agree.
        self._initial: dict | None = None
        # pyspark 4.0 calls latestOffset() without a start: remember where the last batch ended
        # (also the empty range Spark plans on a restart, at the offset log's last end) ...
        self._last_end: Offsets | None = None
        # ... and where the last non-empty batch planned ended, done by the next latestOffset().
        self._planned_end: Offsets | None = None
        self._progress_shown: Offsets | None = None  # what commitGroup last got
        # minOffsetsPerTrigger waits at most maxTriggerDelay since the last batch (or the start).
        self._last_batch_at = time.monotonic()

    # --- driver side ---------------------------------------------------------------------

    def initialOffset(self) -> dict:
        if self._initial is not None:
            return self._initial
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
        self._initial = to_json_offsets(starting)
        return self._initial

    def _latest(self) -> Offsets:
        with metadata_consumer(self.options) as consumer:
            keys = topic_partitions(consumer, self.options)
            return {key: high for key, (_low, high) in watermarks(consumer, keys).items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        # PySpark has no composite limit: maxOffsetsPerTrigger goes to Spark, and
        # minOffsetsPerTrigger, when both are set, is applied from the options.
        if self.options.max_offsets_per_trigger and ReadMaxRows is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        if self.options.min_offsets_per_trigger and ReadMinRows is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self._available_now_target = self._latest()

    def latestOffset(self, start: dict | None = None, limit: ReadLimit | None = None) -> dict:
        # Under Trigger.AvailableNow, never past what existed when the query started.
        target = self._available_now_target
        latest = dict(target) if target is not None else self._latest()
        # Spark plans a batch only once the previous one is done, so `start` (pyspark 4.0: the
        # end of the last batch planned) is finished work. (Spark calls commit() a batch late,
        # and never for the last one.)
        if start is not None:
            begin = from_json_offsets(start)
            self._show_progress(begin)
        else:  # pyspark 4.0 / 4.1
            if self._planned_end is not None:
                self._show_progress(self._planned_end)
            # Before the first batch, the query starts at the initial offsets.
            last = self._last_end
            begin = last if last is not None else from_json_offsets(self.initialOffset())
        # A partition new since `begin` starts at 0 (its earliest), as in Spark.
        latest = {key: max(end, begin.get(key, 0)) for key, end in latest.items()}
        since = {k: begin.get(k, 0) for k in latest}
        if self._too_few(since, latest, limit):
            # No new batch yet: hand back where the last one ended.
            return start if start is not None else to_json_offsets(begin)
        max_records = self._max_records(limit)
        if max_records is not None:
            latest = cap_offsets(since, latest, max_records)
        if latest != since:
            self._last_batch_at = time.monotonic()
        return to_json_offsets(latest)

    def _max_records(self, limit: ReadLimit | None) -> int | None:
        if limit is None:  # pyspark 4.0: no limit passed, apply the option ourselves
            return self.options.max_offsets_per_trigger
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            return limit.max_rows
        return None  # ReadAllAvailable (e.g. Trigger.AvailableNow) or another limit kind

    def _too_few(self, since: Offsets, latest: Offsets, limit: ReadLimit | None) -> bool:
        """minOffsetsPerTrigger: wait for that many new records, but no longer than
        maxTriggerDelay since the last batch. Trigger.AvailableNow never waits."""
        if self._available_now_target is not None:
            return False
        if ReadMinRows is not None and isinstance(limit, ReadMinRows):
            least: int | None = limit.min_rows
        elif ReadAllAvailable is not None and isinstance(limit, ReadAllAvailable):
            least = None  # Spark asked for everything (e.g. Trigger.AvailableNow)
        else:
            least = self.options.min_offsets_per_trigger
        if least is None:
            return False
        waited_ms = (time.monotonic() - self._last_batch_at) * 1000
        new_records = sum(latest[key] - since[key] for key in latest)
        return new_records < least and waited_ms < self.options.max_trigger_delay_ms

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        begin, finish = from_json_offsets(start), from_json_offsets(end)
        self._last_end = dict(finish)
        if finish != begin:
            self._planned_end = dict(finish)
        for key in begin:
            if key not in finish:
                self._lost(f"{key[0]}-{key[1]} was at offset {begin[key]} and is gone")
        with metadata_consumer(self.options) as consumer:
            marks = watermarks(consumer, sorted(finish))
        starting: Offsets = {}
        for key, until in finish.items():
            low, high = marks[key]
            since = begin.get(key, low)
            if until < since:
                self._lost(f"{key[0]}-{key[1]} went back from offset {since} to {until}")
                since = until
            if since < low:
                self._lost(f"{key[0]}-{key[1]}: offsets {since}..{low - 1} were deleted")
                since = min(low, until)
            if high < until:
                self._lost(f"{key[0]}-{key[1]} ends at {high}, before the planned {until}")
            starting[key] = since
        return split_ranges(
            starting,
            finish,
            self.options.max_records_per_partition,
            self.options.min_partitions,
        )

    def commit(self, end: dict) -> None:
        """Spark finished the batch ending at `end`. The checkpoint is the source of truth; with
        `commitGroup`, the end offsets also go to that consumer group, for people to watch."""
        self._last_end = from_json_offsets(end)
        self._show_progress(self._last_end)

    def _show_progress(self, done: Offsets) -> None:
        """Commit `done` (offsets every finished batch read up to) to `commitGroup`, once."""
        group = self.options.commit_group
        if group is not None and done != self._progress_shown:
            commit_progress(self.options, group, done)
            self._progress_shown = dict(done)

    def _lost(self, message: str) -> None:
        if self.options.fail_on_data_loss:
            raise RlogDataLossError(
                f"{message}. Some data may have been lost; set failOnDataLoss=false to continue."
            )

    # --- executor side -------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange), partition
        return read_range(self.options, self.schema, partition)
