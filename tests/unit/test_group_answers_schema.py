"""Every group API the brokers advertise names every field of its answer's schema, at every
advertised version: the group coordinator's answers, taken from a classic group's life (join,
sync, heartbeat, commit, fetch, describe, list, leave, delete) before the codec fills any
default in."""

from __future__ import annotations

from typing import Any

import pytest
from test_admin_answers import missing_fields
from test_consumer_group_coordinator import GROUP, ORDERS, Driver

from rlog.core.protocol.apis import SUPPORTED, ApiKey
from rlog.core.protocol.codec import codec_for
from rlog.core.protocol.errors import ErrorCode
from rlog.core.protocol.schema import load_message

Body = dict[str, Any]
METHODS = {
    ApiKey.JOIN_GROUP: "join_group",
    ApiKey.SYNC_GROUP: "sync_group",
    ApiKey.HEARTBEAT: "heartbeat",
    ApiKey.LEAVE_GROUP: "leave_group",
    ApiKey.OFFSET_COMMIT: "commit_offsets",
    ApiKey.OFFSET_FETCH: "fetch_offsets",
    ApiKey.DESCRIBE_GROUPS: "describe_groups",
    ApiKey.LIST_GROUPS: "list_groups",
    ApiKey.DELETE_GROUPS: "delete_groups",
    ApiKey.OFFSET_DELETE: "delete_offsets",
}
CASES = [(api, v) for api in METHODS for v in range(SUPPORTED[api][0], SUPPORTED[api][1] + 1)]


def request(api: ApiKey, version: int, body: Body) -> Body:
    """`body` as a client of that version sends it: encoded at the version, decoded again."""
    codec = codec_for(api.request_schema, version)
    decoded, _end = codec.decode(codec.encode(body))
    return decoded


class ClassicLife:
    """A classic group with one member, driven with the newest versions except the API under
    test; each answer of that API is kept."""

    def __init__(self, api: ApiKey, version: int) -> None:
        self.api, self.version = api, version
        self.driver = Driver()
        self.answers: list[Body] = []
        self.member = ""
        self.generation = -1

    def send(self, api: ApiKey, body: Body) -> Body:
        version = self.version if api == self.api else SUPPORTED[api][1]
        token = self.driver.send(METHODS[api], request(api, version, body), version)
        answer = self.driver.answer(token)
        if api == self.api:
            self.answers.append(answer)
        return answer

    def run(self) -> None:
        no_topics = b"\x00\x00" + b"\x00\x00\x00\x00" + b"\xff\xff\xff\xff"  # v0, no user data
        join = {"group_id": GROUP, "session_timeout_ms": 10_000, "rebalance_timeout_ms": 10_000,
                "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
                "protocols": [{"name": "range", "metadata": no_topics}],
                "reason": None}  # fmt: skip
        answer = self.send(ApiKey.JOIN_GROUP, join)
        if answer["error_code"] == ErrorCode.MEMBER_ID_REQUIRED:
            answer = self.send(ApiKey.JOIN_GROUP, join | {"member_id": answer["member_id"]})
        assert answer["error_code"] == ErrorCode.NONE, answer
        self.member, self.generation = answer["member_id"], answer["generation_id"]
        identity = {"group_id": GROUP, "member_id": self.member, "generation_id": self.generation,
                    "group_instance_id": None}  # fmt: skip
        synced = self.send(ApiKey.SYNC_GROUP, identity | {"protocol_type": "consumer",
                           "protocol_name": "range", "assignments": [
                               {"member_id": self.member, "assignment": b""}]})  # fmt: skip
        assert synced["error_code"] == ErrorCode.NONE, synced
        self.send(ApiKey.HEARTBEAT, identity)
        partitions = [{"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                       "commit_timestamp": -1, "committed_metadata": ""}]  # fmt: skip
        commit = {"group_id": GROUP, "generation_id_or_member_epoch": self.generation,
                  "member_id": self.member, "group_instance_id": None, "retention_time_ms": -1,
                  "topics": [{"name": ORDERS, "partitions": partitions}]}  # fmt: skip
        self.send(ApiKey.OFFSET_COMMIT, commit)
        topics = [{"name": ORDERS, "partition_indexes": [0, 1]}]
        group = {"group_id": GROUP, "member_id": None, "member_epoch": -1, "topics": topics}
        fetch = {"group_id": GROUP, "topics": topics, "require_stable": False, "groups": [group]}
        self.send(ApiKey.OFFSET_FETCH, fetch)
        self.send(ApiKey.DESCRIBE_GROUPS, {"groups": [GROUP, "nobody"],
                                           "include_authorized_operations": False})  # fmt: skip
        self.send(ApiKey.LIST_GROUPS, {"states_filter": [], "types_filter": []})
        refused = {"group_id": GROUP, "topics": [{"name": ORDERS, "partitions": [
            {"partition_index": 0}]}]}  # fmt: skip
        self.send(ApiKey.OFFSET_DELETE, refused)  # refused: the group has a member
        self.send(ApiKey.LEAVE_GROUP, {"group_id": GROUP, "member_id": self.member,
                  "members": [{"member_id": self.member, "group_instance_id": None,
                               "reason": None}]})  # fmt: skip
        self.send(ApiKey.OFFSET_DELETE, refused)
        self.send(ApiKey.DELETE_GROUPS, {"groups_names": [GROUP, "nobody"]})


@pytest.mark.parametrize(("api", "version"), CASES, ids=[f"{a.name}-v{v}" for a, v in CASES])
def test_group_answers_name_every_field_of_their_schema(api: ApiKey, version: int) -> None:
    life = ClassicLife(api, version)
    life.run()
    assert life.answers, f"{api.name} was not asked"
    response = load_message(api.response_schema).struct
    for answer in life.answers:
        assert missing_fields(response, version, answer, api.name, set()) == [], answer
        codec_for(api.response_schema, version).encode(answer)
