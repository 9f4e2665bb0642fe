"""The broker's table of Kafka APIs: which keys exist, which versions we serve, header versions.

`SUPPORTED` is the one place the advertised ranges live: ApiVersions answers from
it and the connection refuses anything outside it. Add an API here when its handler lands.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import IntEnum
from functools import cache
from typing import Any

from .errors import ErrorCode
from .schema import load_message


class ApiKey(IntEnum):
    PRODUCE = 0
    FETCH = 1
    LIST_OFFSETS = 2
    METADATA = 3
    OFFSET_COMMIT = 8
    OFFSET_FETCH = 9
    FIND_COORDINATOR = 10
    JOIN_GROUP = 11
    HEARTBEAT = 12
    LEAVE_GROUP = 13
    SYNC_GROUP = 14
    DESCRIBE_GROUPS = 15
    LIST_GROUPS = 16
    SASL_HANDSHAKE = 17
    API_VERSIONS = 18
    CREATE_TOPICS = 19
    DELETE_TOPICS = 20
    DELETE_RECORDS = 21
    INIT_PRODUCER_ID = 22
    OFFSET_FOR_LEADER_EPOCH = 23
    ADD_PARTITIONS_TO_TXN = 24
    ADD_OFFSETS_TO_TXN = 25
    END_TXN = 26
    WRITE_TXN_MARKERS = 27
    TXN_OFFSET_COMMIT = 28
    DESCRIBE_ACLS = 29
    CREATE_ACLS = 30
    DELETE_ACLS = 31
    DESCRIBE_CONFIGS = 32
    ALTER_CONFIGS = 33
    DESCRIBE_LOG_DIRS = 35
    SASL_AUTHENTICATE = 36
    CREATE_PARTITIONS = 37
    DELETE_GROUPS = 42
    ELECT_LEADERS = 43
    INCREMENTAL_ALTER_CONFIGS = 44
    OFFSET_DELETE = 47
    DESCRIBE_CLIENT_QUOTAS = 48
    DESCRIBE_USER_SCRAM_CREDENTIALS = 50
    ALTER_USER_SCRAM_CREDENTIALS = 51
    ALTER_PARTITION = 56
    DESCRIBE_CLUSTER = 60
    DESCRIBE_PRODUCERS = 61
    BROKER_REGISTRATION = 62
    BROKER_HEARTBEAT = 63
    DESCRIBE_TRANSACTIONS = 65
    LIST_TRANSACTIONS = 66
    ALLOCATE_PRODUCER_IDS = 67
    CONSUMER_GROUP_HEARTBEAT = 68
    CONSUMER_GROUP_DESCRIBE = 69
    DESCRIBE_TOPIC_PARTITIONS = 75

    @property
    def schema_name(self) -> str:
        """`OFFSET_FOR_LEADER_EPOCH` -> `OffsetForLeaderEpoch` (+ "Request"/"Response")."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @property
    def request_schema(self) -> str:
        return self.schema_name + "Request"

    @property
    def response_schema(self) -> str:
        return self.schema_name + "Response"


# Versions the broker serves, inclusive.
SUPPORTED: dict[ApiKey, tuple[int, int]] = {
    ApiKey.PRODUCE: (3, 8),
    ApiKey.FETCH: (4, 12),  # v12: flexible; followers send last_fetched_epoch (KIP-320)
    ApiKey.LIST_OFFSETS: (1, 10),  # v7 max timestamp (KIP-734); v8/v9 answer as without tiering
    ApiKey.METADATA: (1, 12),  # v10+ topic ids (KIP-516), v12 topics asked for by id
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.CREATE_TOPICS: (0, 4),
    ApiKey.DELETE_TOPICS: (0, 3),
    ApiKey.CREATE_PARTITIONS: (0, 1),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.DESCRIBE_CONFIGS: (0, 4),  # v1+ synonyms, v3+ types and documentation, v4 flexible
    ApiKey.ALTER_CONFIGS: (0, 2),  # legacy: replaces the set; forwarded as the incremental one
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.DESCRIBE_LOG_DIRS: (0, 4),  # v4: the volume's total and usable bytes
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: (0, 0),  # KIP-966, paged; no ELR (always empty)
    # Idempotence and transactions. AddPartitionsToTxn v4+ is the brokers' own form (KIP-890
    # verification); clients send up to v3.
    ApiKey.INIT_PRODUCER_ID: (0, 4),
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 4),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 3),
    ApiKey.END_TXN: (0, 3),
    ApiKey.WRITE_TXN_MARKERS: (0, 1),
    ApiKey.TXN_OFFSET_COMMIT: (0, 3),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),  # any replica answers from its producer state
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (2, 3),
    ApiKey.DELETE_RECORDS: (0, 2),  # the log start moves on every live replica
    ApiKey.OFFSET_COMMIT: (2, 9),  # v8+ flexible; v9 for a classic group is v8
    ApiKey.OFFSET_FETCH: (1, 9),  # v7 require_stable, v8+ several groups at once
    ApiKey.FIND_COORDINATOR: (0, 2),
    ApiKey.JOIN_GROUP: (0, 5),
    ApiKey.HEARTBEAT: (0, 3),
    ApiKey.LEAVE_GROUP: (0, 3),
    ApiKey.SYNC_GROUP: (0, 3),
    ApiKey.DESCRIBE_GROUPS: (0, 4),
    ApiKey.LIST_GROUPS: (0, 5),  # v3+ flexible; v4 filters by state, v5 by type
    ApiKey.DELETE_GROUPS: (0, 1),
    ApiKey.OFFSET_DELETE: (0, 0),
    # The consumer group protocol (KIP-848); v1 adds regex subscriptions, refused for now.
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 0),
    # ACLs and SCRAM credentials, kept in the metadata log: the changes are forwarded to the
    # controller, the descriptions answered from this broker's image.
    ApiKey.DESCRIBE_ACLS: (0, 3),
    ApiKey.CREATE_ACLS: (0, 3),
    ApiKey.DELETE_ACLS: (0, 3),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    # SASL on SASL_PLAINTEXT and SASL_SSL listeners (core/security/sasl.py). The handshake is
    # advertised from v0, as librdkafka needs to use it at all, though v0's raw tokens are
    # refused; every listener lists them, as Kafka's do.
    ApiKey.SASL_HANDSHAKE: (0, 1),
    ApiKey.SASL_AUTHENTICATE: (0, 2),
}

# Versions the controller serves: brokers register, heartbeat, fetch the metadata log
# (`__cluster_metadata`, by Fetch), propose ISR changes and take producer-id blocks; brokers
# forward admin requests (topics, elections, ACLs, SCRAM credentials) here. KRaft's own APIs,
# with topic names (AlterPartition v0-1) since rlog's metadata is keyed by name.
CONTROLLER_SUPPORTED: dict[ApiKey, tuple[int, int]] = {
    ApiKey.API_VERSIONS: (0, 3),
    ApiKey.FETCH: (4, 11),
    ApiKey.CREATE_TOPICS: (0, 4),
    ApiKey.DELETE_TOPICS: (0, 3),
    ApiKey.CREATE_PARTITIONS: (0, 1),
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    ApiKey.ALTER_PARTITION: (0, 1),
    ApiKey.BROKER_REGISTRATION: (0, 3),  # v3: PreviousBrokerEpoch
    ApiKey.BROKER_HEARTBEAT: (0, 0),
    ApiKey.ALLOCATE_PRODUCER_IDS: (0, 0),
    # Forwarded by the brokers (the Describe APIs are the brokers' own).
    ApiKey.CREATE_ACLS: (0, 3),
    ApiKey.DELETE_ACLS: (0, 3),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
}

# Header versions: request v1 / response v0, or v2 / v1 in flexible versions (tags added).
REQUEST_HEADER_VERSION = 1
REQUEST_HEADER_VERSION_FLEXIBLE = 2
RESPONSE_HEADER_VERSION = 0
RESPONSE_HEADER_VERSION_FLEXIBLE = 1


def is_supported(api_key: ApiKey, version: int) -> bool:
    versions = SUPPORTED.get(api_key)
    return versions is not None and versions[0] <= version <= versions[1]


@cache
def header_versions(api_key: ApiKey, version: int) -> tuple[int, int]:
    """(request header version, response header version) for this API version."""
    flexible = load_message(api_key.request_schema).flexible(version)
    request = REQUEST_HEADER_VERSION_FLEXIBLE if flexible else REQUEST_HEADER_VERSION
    # ApiVersions answers with header v0 always: a client that does not know the broker's
    # versions yet must be able to read the answer (KIP-511).
    if flexible and api_key != ApiKey.API_VERSIONS:
        return request, RESPONSE_HEADER_VERSION_FLEXIBLE
    return request, RESPONSE_HEADER_VERSION


def api_versions_entries(only: ApiKey | None = None) -> list[dict[str, Any]]:
    """The ApiVersions response's `api_keys` list (of one API, for the error-35 answer)."""
    return [
        {"api_key": int(key), "min_version": low, "max_version": high}
        for key, (low, high) in sorted(SUPPORTED.items())
        if only is None or key == only
    ]


def api_versions_body(
    table: Mapping[ApiKey, tuple[int, int]], *, unsupported: bool
) -> dict[str, Any]:
    """The ApiVersions answer of a server with this table; for a version above its range, the
    error-35 body listing only ApiVersions' own range (read as v0 by every client)."""
    if unsupported:
        low, high = table[ApiKey.API_VERSIONS]
        entry = {"api_key": ApiKey.API_VERSIONS, "min_version": low, "max_version": high}
        return {"error_code": ErrorCode.UNSUPPORTED_VERSION, "api_keys": [entry]}
    return {
        "error_code": ErrorCode.NONE,
        "api_keys": [
            {"api_key": key, "min_version": low, "max_version": high}
            for key, (low, high) in sorted(table.items())
        ],
        "throttle_time_ms": 0,
    }
