"""Driver-side planning without a SparkSession: options, offset caps, the 4.0 latestOffset()."""

from __future__ import annotations

import pickle

import pytest

from rlog.spark.options import RlogOptionError, parse_read_options
from rlog.spark.planning import OffsetRange, RlogDataLossError, split_ranges
from rlog.spark.records import kafka_schema
from rlog.spark.stream_reader import RlogStreamReader, cap_offsets
from support import clients
from support.clients import Message


def test_split_ranges_and_pickling() -> None:
    ranges = split_ranges({("t", 0): 3, ("t", 1): 5}, {("t", 0): 10, ("t", 1): 5}, 3)
    assert [r.value for r in ranges] == [("t", 0, 3, 6), ("t", 0, 6, 9), ("t", 0, 9, 10)]
    assert pickle.loads(pickle.dumps(ranges[0])) == OffsetRange("t", 0, 3, 6)


def test_cap_offsets_is_proportional_and_always_progresses() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 100, ("t", 1): 10, ("t", 2): 0}
    capped = cap_offsets(start, latest, 11)
    assert sum(capped.values()) == 11
    assert capped[("t", 0)] == 10 and capped[("t", 1)] == 1 and capped[("t", 2)] == 0
    assert cap_offsets(start, latest, 1000) == latest


def test_option_errors() -> None:
    base = {"kafka.bootstrap.servers": "x:1"}
    with pytest.raises(RlogOptionError, match="JSON like"):
        parse_read_options({**base, "subscribe": "t", "startingOffsets": "{bad"}, streaming=False)
    with pytest.raises(RlogOptionError, match="exactly one of"):
        parse_read_options({**base, "subscribe": "t", "assign": "{}"}, streaming=False)
    with pytest.raises(RlogOptionError, match="positive integer"):
        parse_read_options({**base, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, streaming=True)
    parsed = parse_read_options({**base, "Subscribe": "t", "kafka.Client.Id": "c"}, streaming=True)
    assert parsed.client_config == {"bootstrap.servers": "x:1", "client.id": "c"}
    assert parsed.starting.kind == "latest" and parsed.fail_on_data_loss
    with pytest.raises(RlogOptionError, match="streaming reads only"):
        parse_read_options({**base, "subscribe": "t", "commitGroup": "g"}, streaming=False)
    with pytest.raises(RlogOptionError, match="must name a consumer group"):
        parse_read_options({**base, "subscribe": "t", "commitGroup": " "}, streaming=True)
    parsed = parse_read_options({**base, "subscribe": "t", "commitGroup": "g"}, streaming=True)
    assert parsed.commit_group == "g"


@pytest.mark.integration
def test_stream_reader_offsets_without_admission_control(spark_cluster) -> None:
    """pyspark 4.0 calls latestOffset() with no arguments, the first time before initialOffset():
    maxOffsetsPerTrigger still applies, from the first batch on."""
    clients.create_topic(spark_cluster.bootstrap, "planned", partitions=2)
    messages = [Message(None, b"%d" % i, (), i % 2, -1) for i in range(20)]
    clients.confluent_produce(spark_cluster.bootstrap, "planned", messages)
    options = {
        "kafka.bootstrap.servers": spark_cluster.bootstrap,
        "subscribe": "planned",
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": "6",
    }
    reader = RlogStreamReader(parse_read_options(options, streaming=True), kafka_schema(False))
    start = reader.initialOffset()
    assert start == {"planned": {"0": 0, "1": 0}}
    assert reader.latestOffset() == {"planned": {"0": 3, "1": 3}}  # from the initial offsets
    end = reader.latestOffset(start, None)
    assert end == {"planned": {"0": 3, "1": 3}}
    assert [p.value for p in reader.partitions(start, end)] == [
        ("planned", 0, 0, 3),
        ("planned", 1, 0, 3),
    ]
    reader.commit(end)
    assert reader.latestOffset() == {"planned": {"0": 6, "1": 6}}  # from the committed end
    pieces = reader.partitions(start, end)
    batches = list(reader.read(pieces[1]))
    assert [v.as_py() for b in batches for v in b.column("value")] == [b"1", b"3", b"5"]
    # pyspark 4.0's order on a fresh query: latestOffset() first, then initialOffset(), which
    # must be where that first batch starts.
    fresh = RlogStreamReader(parse_read_options(options, streaming=True), kafka_schema(False))
    assert fresh.latestOffset() == {"planned": {"0": 3, "1": 3}}
    assert fresh.initialOffset() == start
    at_latest = {**options, "startingOffsets": "latest"}
    tail = RlogStreamReader(parse_read_options(at_latest, streaming=True), kafka_schema(False))
    assert tail.latestOffset() == {"planned": {"0": 10, "1": 10}}  # nothing new: no batch
    clients.confluent_produce(spark_cluster.bootstrap, "planned", messages[:2])
    assert tail.initialOffset() == {"planned": {"0": 10, "1": 10}}  # the same as before


@pytest.mark.integration
def test_fail_on_data_loss(spark_cluster) -> None:
    clients.create_topic(spark_cluster.bootstrap, "lossy")
    clients.confluent_produce(
        spark_cluster.bootstrap, "lossy", [Message(None, b"x", (), 0, -1)] * 3
    )
    options = {"kafka.bootstrap.servers": spark_cluster.bootstrap, "subscribe": "lossy"}
    strict = RlogStreamReader(parse_read_options(options, streaming=True), kafka_schema(False))
    # The checkpoint says offset 10 was reached, but the log now ends at 3 (truncated / recreated).
    with pytest.raises(RlogDataLossError, match="went back"):
        strict.partitions({"lossy": {"0": 10}}, {"lossy": {"0": 3}})
    with pytest.raises(RlogDataLossError, match="ends at 3"):
        strict.partitions({"lossy": {"0": 0}}, {"lossy": {"0": 8}})
    lenient = RlogStreamReader(
        parse_read_options({**options, "failOnDataLoss": "false"}, streaming=True),
        kafka_schema(False),
    )
    assert lenient.partitions({"lossy": {"0": 10}}, {"lossy": {"0": 3}}) == []
