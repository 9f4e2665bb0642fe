from __future__ import annotations

import pytest

from rlog.core.limits import LOG_SEGMENT_BYTES_DEFAULT, MESSAGE_MAX_BYTES
from rlog.core.storage.config import LOG_CONFIG_NAMES, WEEK_MS, LogConfig


def test_defaults_are_kafkas() -> None:
    config = LogConfig()
    assert config.segment_bytes == LOG_SEGMENT_BYTES_DEFAULT
    assert config.segment_ms == config.retention_ms == WEEK_MS == 604_800_000
    assert (config.retention_bytes, config.index_interval_bytes) == (-1, 4096)
    assert config.flush_messages == config.flush_ms == 2**63 - 1
    assert config.message_max_bytes == MESSAGE_MAX_BYTES
    assert (config.message_timestamp_type, config.cleanup_policy) == ("CreateTime", "delete")


def test_from_and_to_kafka_properties() -> None:
    base = LogConfig(segment_bytes=1_000)
    config = LogConfig.from_kafka_properties(
        {
            "retention.ms": "-1",
            "retention.bytes": " 4096 ",
            "message.timestamp.type": "LogAppendTime",
            "cleanup.policy": "delete,compact",
            "flush.messages": "1",
        },
        base,
    )
    assert config.segment_bytes == 1_000  # kept from the base
    assert (config.retention_ms, config.retention_bytes, config.flush_messages) == (-1, 4096, 1)
    assert config.log_append_time
    assert config.cleanup_policy == "compact,delete" and config.deletes_by_retention
    properties = config.to_kafka_properties()
    assert set(properties) == LOG_CONFIG_NAMES
    assert LogConfig.from_kafka_properties(properties) == config


@pytest.mark.parametrize(
    ("properties", "message"),
    [
        ({"retention.ms": "x"}, "invalid value 'x' for retention.ms"),
        ({"retention.ms": "1_000"}, "invalid value '1_000' for retention.ms"),
        ({"retention.ms": "-2"}, "invalid value '-2' for retention.ms"),
        ({"segment.bytes": "13"}, "invalid value '13' for segment.bytes"),
        ({"segment.bytes": str(2**31)}, "for segment.bytes"),
        ({"segment.ms": "0"}, "for segment.ms"),
        ({"flush.messages": "0"}, "for flush.messages"),
        ({"message.timestamp.type": "Now"}, "for message.timestamp.type"),
        ({"cleanup.policy": "shred"}, "for cleanup.policy"),
        ({"min.insync.replicas": "2"}, "unknown log config 'min.insync.replicas'"),
    ],
)
def test_bad_properties_are_refused(properties: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LogConfig.from_kafka_properties(properties)


def test_constructor_checks_ranges_too() -> None:
    with pytest.raises(ValueError, match=r"index\.interval\.bytes"):
        LogConfig(index_interval_bytes=-1)
