"""ACL enforcement, sans-IO: given a decoded request, who sent it and the ACLs in force, which
resources it may not touch, and how the request and its answer change because of it.

`rule(api_key, version, body, requester, view)` applies the checks of `API_AUTHORIZATION`
(api_operations.py) to one request, in one pass over the resources it names (never over its
records), and returns a `Ruling`:
- `refused`: a REQUEST-scope check failed: the whole request is answered with this error in its
  API's shape (the daemon's `error_answer`), and nothing is served;
- `body`: EACH-scope checks failed for some resources: serve this copy of the request, which
  names only the allowed ones, then pass the answer through `finish`, which adds an entry with
  the error for each denied one;
- `answer`: every resource was denied: this is the answer, and nothing is served;
- `finish` alone: FILTERED checks: the answer is served as usual and `finish` drops from it
  what the requester may not see (silently: a listing must not reveal that a resource exists);
- `close`: an acks=0 Produce with a denial: there is no answer to carry the error, so the
  connection is closed, as Kafka does.
`denials` lists every REQUEST or EACH denial, for the journal; FILTERED ones are not denials a
client notices (Kafka does not log them either).

The daemon calls `rule` only when an authorizer is configured and the requester is not trusted,
so a cluster without authorization does no work here.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.security.acl import CLUSTER_NAME, AclOperation, Authorizer, ResourceType
from rlog.core.security.api_operations import (
    ALTER_USER_SCRAM_CREDENTIALS,
    API_AUTHORIZATION,
    BY_TYPE,
    CONFIG_BROKER,
    CONFIG_BROKER_LOGGER,
    CONFIG_GROUP,
    CONFIG_TOPIC,
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_ACLS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    Check,
    Grant,
    allows,
)

Body = dict[str, Any]
Finish = Callable[[Body], Body]

ZERO_UUID = uuid.UUID(int=0)
NO_AUTHORIZED_OPERATIONS = -(2**31)


@dataclass(frozen=True, slots=True)
class Requester:
    """Who sent a request: `User:alice`, and the client's address as ACLs name hosts."""

    principal: str
    host: str


@dataclass(frozen=True, slots=True)
class BrokerView:
    """What the broker knows beyond the request: the ACLs, which topics exist (Metadata checks
    CREATE for a topic it would auto-create), and topic names by id (32 hex digits)."""

    authorizer: Authorizer
    topics: Mapping[str, object]
    topic_names_by_id: Mapping[str, str]
    auto_create_topics: bool = True


@dataclass(frozen=True, slots=True)
class Denial:
    """One refused operation on one resource, as the journal records it."""

    api_key: int
    operation: AclOperation
    resource_type: ResourceType
    resource_name: str
    error: ErrorCode


@dataclass(slots=True)
class Ruling:
    denials: list[Denial] = field(default_factory=list)
    refused: ErrorCode | None = None
    body: Body | None = None
    answer: Body | None = None
    finish: Finish | None = None
    close: bool = False

    @property
    def allowed(self) -> bool:
        """Serve the request exactly as it came."""
        return (
            self.refused is None
            and self.body is None
            and self.answer is None
            and self.finish is None
            and not self.close
        )


class _Gate:
    """One request's checks against the authorizer; collects the denials."""

    __slots__ = ("api_key", "authorizer", "denials", "host", "principal")

    def __init__(self, api_key: int, requester: Requester, authorizer: Authorizer) -> None:
        self.api_key = api_key
        self.principal = requester.principal
        self.host = requester.host
        self.authorizer = authorizer
        self.denials: list[Denial] = []

    def passes(self, check: Check, name: str | None = None) -> bool:
        """Whether `check` passes for resource `name`; a failure is a denial (journaled)."""
        if allows(self.authorizer, self.principal, self.host, check, name):
            return True
        grant = _reported_grant(check.any_of)
        resource = CLUSTER_NAME if grant.resource_type == ResourceType.CLUSTER else name
        self.denials.append(
            Denial(
                self.api_key,
                grant.operation,
                grant.resource_type,
                resource if resource is not None else "*",
                check.error,
            )
        )
        return False

    def sees(self, check: Check, name: str) -> bool:
        """A FILTERED check: whether the resource stays in the answer (never a denial)."""
        return allows(self.authorizer, self.principal, self.host, check, name)

    def refuse(self, error: ErrorCode) -> Ruling:
        return Ruling(self.denials, refused=error)


def _reported_grant(grants: tuple[Grant, ...]) -> Grant:
    """The grant a denial names: the most specific one (a resource's rather than the cluster's
    or "any resource of the type")."""
    for grant in reversed(grants):
        if grant.names != BY_TYPE and grant.resource_type != ResourceType.CLUSTER:
            return grant
    for grant in grants:
        if grant.names != BY_TYPE:
            return grant
    return grants[0]


def _checks(api_key: int) -> tuple[Check, ...]:
    return API_AUTHORIZATION[api_key].checks


def _on_cluster_only(check: Check) -> Check:
    """The check's CLUSTER grant alone: asked once per request where it covers every resource."""
    (grant,) = (g for g in check.any_of if g.resource_type == ResourceType.CLUSTER)
    return Check((grant,), check.error, check.scope, check.when)


# ---- EACH scope over a list of named entries ----------------------------------------------


def _split(
    gate: _Gate, check: Check, items: Iterable[Any], name_of: Callable[[Any], str]
) -> tuple[list[Any], list[Any]]:
    """(allowed, denied) items of a request list, one decision per distinct name."""
    allowed: list[Any] = []
    denied: list[Any] = []
    verdicts: dict[str, bool] = {}
    for item in items:
        name = name_of(item)
        verdict = verdicts.get(name)
        if verdict is None:
            verdict = verdicts[name] = gate.passes(check, name)
        (allowed if verdict else denied).append(item)
    return allowed, denied


def _each(
    gate: _Gate,
    body: Body,
    denied: list[Any],
    request_key: str,
    allowed: list[Any],
    answer_key: str,
    denied_entry: Callable[[Any], Body],
    empty_answer: Callable[[], Body],
) -> Ruling:
    """The ruling of an EACH check over `body[request_key]`: serve the allowed entries, answer
    the denied ones with `denied_entry`."""
    if not denied:
        return Ruling(gate.denials)
    entries = [denied_entry(item) for item in denied]

    def finish(answer: Body) -> Body:
        answer[answer_key] = list(answer.get(answer_key) or ()) + entries
        return answer

    if not allowed:
        return Ruling(gate.denials, answer=finish(empty_answer()))
    return Ruling(gate.denials, body={**body, request_key: allowed}, finish=finish)


def _partitions_with(
    indexes: Iterable[int], error: ErrorCode, index_key: str = "partition_index", **fields: Any
) -> list[Body]:
    return [{index_key: index, "error_code": error, **fields} for index in indexes]


# ---- the APIs -----------------------------------------------------------------------------

_PRODUCE_TXN, _PRODUCE_TOPICS = _checks(ApiKey.PRODUCE)


def _produce(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    transactional_id = body.get("transactional_id")
    if transactional_id is not None and not gate.passes(_PRODUCE_TXN, transactional_id):
        return Ruling(gate.denials, refused=_PRODUCE_TXN.error, close=body.get("acks") == 0)
    check = _PRODUCE_TOPICS
    allowed, denied = _split(gate, check, body["topic_data"], lambda t: t["name"])
    if denied and body.get("acks") == 0:
        return Ruling(gate.denials, close=True)  # no answer can carry the error
    return _each(
        gate,
        body,
        denied,
        "topic_data",
        allowed,
        "responses",
        lambda t: {
            "name": t["name"],
            "partition_responses": _partitions_with(
                (p["index"] for p in t["partition_data"]),
                check.error,
                "index",
                base_offset=-1,
                log_append_time_ms=-1,
                log_start_offset=-1,
                record_errors=[],
                error_message=None,
            ),
        },
        lambda: {"throttle_time_ms": 0, "responses": []},
    )


_FETCH_FOLLOWER, _FETCH_CONSUMER = _checks(ApiKey.FETCH)


def _fetch(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    topics = body["topics"]
    if body.get("replica_id", -1) >= 0:
        # A follower may fetch only as the cluster's own: a denial fails every partition.
        if gate.passes(_FETCH_FOLLOWER):
            return Ruling(gate.denials)
        allowed: list[Body] = []
        denied: list[Body] = list(topics)
        error = _FETCH_FOLLOWER.error
    else:
        allowed, denied = _split(gate, _FETCH_CONSUMER, topics, lambda t: t["topic"])
        error = _FETCH_CONSUMER.error
    return _each(
        gate,
        body,
        denied,
        "topics",
        allowed,
        "responses",
        lambda t: {
            "topic": t["topic"],
            "partitions": [_empty_fetch_partition(p["partition"], error) for p in t["partitions"]],
        },
        lambda: {"throttle_time_ms": 0, "error_code": 0, "session_id": 0, "responses": []},
    )


def _empty_fetch_partition(index: int, error: ErrorCode) -> Body:
    return {
        "partition_index": index,
        "error_code": error,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": [],
        "preferred_read_replica": -1,
        "records": b"",  # empty, not null: librdkafka refuses a null record set
    }


(_LIST_OFFSETS_TOPICS,) = _checks(ApiKey.LIST_OFFSETS)


def _list_offsets(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    check = _LIST_OFFSETS_TOPICS
    allowed, denied = _split(gate, check, body["topics"], lambda t: t["name"])
    return _each(
        gate,
        body,
        denied,
        "topics",
        allowed,
        "topics",
        lambda t: {
            "name": t["name"],
            "partitions": _partitions_with(
                (p["partition_index"] for p in t["partitions"]),
                check.error,
                timestamp=-1,
                offset=-1,
                leader_epoch=-1,
            ),
        },
        lambda: {"throttle_time_ms": 0, "topics": []},
    )


_METADATA_NAMED, _METADATA_ALL, _METADATA_CREATE = _checks(ApiKey.METADATA)


def _metadata(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    requested = body.get("topics")
    if requested is None:  # all topics: leave out those the requester may not describe
        return Ruling(gate.denials, finish=_filter_topics(gate, _METADATA_ALL, "topics"))
    auto_create = view.auto_create_topics and body.get("allow_auto_topic_creation", True)
    allowed: list[Body] = []
    entries: list[Body] = []
    for topic in requested:
        name = topic.get("name")
        if name is None:  # v12: by id; an id nobody has is the handler's UNKNOWN_TOPIC_ID
            topic_id = topic.get("topic_id") or ZERO_UUID
            known = view.topic_names_by_id.get(topic_id.hex)
            if known is None or gate.passes(_METADATA_NAMED, known):
                allowed.append(topic)
            else:
                entries.append(_metadata_topic(_METADATA_NAMED.error, None, topic_id))
            continue
        if not gate.passes(_METADATA_NAMED, name):
            entries.append(_metadata_topic(_METADATA_NAMED.error, name, ZERO_UUID))
            continue
        # A topic it would auto-create needs CREATE on the cluster or on the topic.
        creates = auto_create and name not in view.topics
        if creates and not gate.passes(_METADATA_CREATE, name):
            entries.append(_metadata_topic(_METADATA_CREATE.error, name, ZERO_UUID))
            continue
        allowed.append(topic)
    if not entries:
        return Ruling(gate.denials)

    def finish(answer: Body) -> Body:
        answer["topics"] = list(answer.get("topics") or ()) + entries
        return answer

    # Served even when nothing is left: the answer still carries the brokers.
    return Ruling(gate.denials, body={**body, "topics": allowed}, finish=finish)


def _metadata_topic(error: ErrorCode, name: str | None, topic_id: uuid.UUID) -> Body:
    return {
        "error_code": error,
        "name": name,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
    }


def _filter_topics(gate: _Gate, check: Check, answer_key: str, name_key: str = "name") -> Finish:
    def finish(answer: Body) -> Body:
        answer[answer_key] = [
            topic
            for topic in answer.get(answer_key) or ()
            if topic.get(name_key) is None or gate.sees(check, topic[name_key])
        ]
        return answer

    return finish


def _group_only(api_key: int) -> Callable[[_Gate, int, Body, BrokerView], Ruling]:
    (check,) = _checks(api_key)

    def rule(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
        if gate.passes(check, body["group_id"]):
            return Ruling(gate.denials)
        return gate.refuse(check.error)

    return rule


def _topic_partitions_each(
    gate: _Gate,
    check: Check,
    body: Body,
    request_key: str = "topics",
    answer_key: str = "topics",
    empty: Callable[[], Body] | None = None,
    **partition_fields: Any,
) -> Ruling:
    """EACH over `body[request_key]` of {name, partitions: [{partition_index}]} entries, whose
    answer lists {name, partitions: [{partition_index, error_code, ...}]}."""
    allowed, denied = _split(gate, check, body[request_key], lambda t: t["name"])
    return _each(
        gate,
        body,
        denied,
        request_key,
        allowed,
        answer_key,
        lambda t: {
            "name": t["name"],
            "partitions": _partitions_with(
                (p["partition_index"] for p in t["partitions"]), check.error, **partition_fields
            ),
        },
        empty or (lambda: {"throttle_time_ms": 0, answer_key: []}),
    )


_OFFSET_COMMIT_GROUP, _OFFSET_COMMIT_TOPICS = _checks(ApiKey.OFFSET_COMMIT)


def _offset_commit(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    if not gate.passes(_OFFSET_COMMIT_GROUP, body["group_id"]):
        return gate.refuse(_OFFSET_COMMIT_GROUP.error)
    return _topic_partitions_each(gate, _OFFSET_COMMIT_TOPICS, body)


_OFFSET_FETCH_GROUP, _OFFSET_FETCH_TOPICS, _OFFSET_FETCH_ALL = _checks(ApiKey.OFFSET_FETCH)


def _offset_fetch(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    if version < 8:
        if not gate.passes(_OFFSET_FETCH_GROUP, body["group_id"]):
            return gate.refuse(_OFFSET_FETCH_GROUP.error)
        topics = body.get("topics")
        if topics is None:
            return Ruling(gate.denials, finish=_filter_topics(gate, _OFFSET_FETCH_ALL, "topics"))
        check = _OFFSET_FETCH_TOPICS
        allowed, denied = _split(gate, check, topics, lambda t: t["name"])
        return _each(
            gate,
            body,
            denied,
            "topics",
            allowed,
            "topics",
            lambda t: _offset_fetch_topic(t, check.error),
            lambda: {"throttle_time_ms": 0, "error_code": 0, "topics": []},
        )
    # v8+: several groups, each answered on its own.
    served: list[Body] = []
    denied_groups: list[Body] = []
    denied_topics: dict[str, list[Body]] = {}
    filtered: set[str] = set()
    for group in body["groups"]:
        group_id = group["group_id"]
        if not gate.passes(_OFFSET_FETCH_GROUP, group_id):
            denied_groups.append(
                {"group_id": group_id, "topics": [], "error_code": _OFFSET_FETCH_GROUP.error}
            )
            continue
        topics = group.get("topics")
        if topics is None:
            filtered.add(group_id)
            served.append(group)
            continue
        allowed, denied = _split(gate, _OFFSET_FETCH_TOPICS, topics, lambda t: t["name"])
        if denied:
            denied_topics[group_id] = [
                _offset_fetch_topic(t, _OFFSET_FETCH_TOPICS.error) for t in denied
            ]
            group = {**group, "topics": allowed}
        served.append(group)
    if not denied_groups and not denied_topics and not filtered:
        return Ruling(gate.denials)

    def finish(answer: Body) -> Body:
        groups = list(answer.get("groups") or ())
        for entry in groups:
            group_id = entry.get("group_id")
            if group_id in denied_topics:
                entry["topics"] = list(entry.get("topics") or ()) + denied_topics[group_id]
            if group_id in filtered:
                entry["topics"] = [
                    t for t in entry.get("topics") or () if gate.sees(_OFFSET_FETCH_ALL, t["name"])
                ]
        answer["groups"] = groups + denied_groups
        return answer

    if not served:
        return Ruling(gate.denials, answer=finish({"throttle_time_ms": 0, "groups": []}))
    return Ruling(gate.denials, body={**body, "groups": served}, finish=finish)


def _offset_fetch_topic(topic: Body, error: ErrorCode) -> Body:
    return {
        "name": topic["name"],
        "partitions": _partitions_with(
            topic.get("partition_indexes") or (),
            error,
            committed_offset=-1,
            committed_leader_epoch=-1,
            metadata=None,
        ),
    }


_FIND_GROUP, _FIND_TXN = _checks(ApiKey.FIND_COORDINATOR)


def _find_coordinator(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    check = _FIND_TXN if body.get("key_type", 0) == 1 else _FIND_GROUP
    if gate.passes(check, body.get("key") or ""):
        return Ruling(gate.denials)
    return gate.refuse(check.error)


(_DESCRIBE_GROUPS,) = _checks(ApiKey.DESCRIBE_GROUPS)


def _describe_groups(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    check = _DESCRIBE_GROUPS
    allowed, denied = _split(gate, check, body["groups"], lambda g: g)
    return _each(
        gate,
        body,
        denied,
        "groups",
        allowed,
        "groups",
        lambda g: {
            "error_code": check.error,
            "group_id": g,
            "group_state": "",
            "protocol_type": "",
            "protocol_data": "",
            "members": [],
            "authorized_operations": NO_AUTHORIZED_OPERATIONS,
        },
        lambda: {"throttle_time_ms": 0, "groups": []},
    )


(_LIST_GROUPS,) = _checks(ApiKey.LIST_GROUPS)


def _list_groups(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    if gate.sees(_on_cluster_only(_LIST_GROUPS), CLUSTER_NAME):
        return Ruling(gate.denials)
    return Ruling(gate.denials, finish=_filter_topics(gate, _LIST_GROUPS, "groups", "group_id"))


_CREATE_TOPICS, _CREATE_TOPICS_CONFIGS = _checks(ApiKey.CREATE_TOPICS)


def _create_topics(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    check = _CREATE_TOPICS
    # CREATE on the cluster covers every topic: asked once, not per topic.
    if gate.sees(_on_cluster_only(check), CLUSTER_NAME):
        return Ruling(gate.denials)
    allowed, denied = _split(gate, check, body["topics"], lambda t: t["name"])
    return _each(
        gate,
        body,
        denied,
        "topics",
        allowed,
        "topics",
        lambda t: {"name": t["name"], "error_code": check.error, "error_message": None},
        lambda: {"throttle_time_ms": 0, "topics": []},
    )


(_DELETE_TOPICS,) = _checks(ApiKey.DELETE_TOPICS)


def _delete_topics(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    check = _DELETE_TOPICS
    if gate.sees(_on_cluster_only(check), CLUSTER_NAME):
        return Ruling(gate.denials)
    allowed, denied = _split(gate, check, body["topic_names"], lambda name: name)
    return _each(
        gate,
        body,
        denied,
        "topic_names",
        allowed,
        "responses",
        lambda name: {"name": name, "error_code": check.error},
        lambda: {"throttle_time_ms": 0, "responses": []},
    )


(_DELETE_RECORDS,) = _checks(ApiKey.DELETE_RECORDS)


def _delete_records(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    return _topic_partitions_each(gate, _DELETE_RECORDS, body, low_watermark=-1)


_INIT_TXN, _INIT_IDEMPOTENT = _checks(ApiKey.INIT_PRODUCER_ID)


def _init_producer_id(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    transactional_id = body.get("transactional_id")
    if transactional_id is not None:
        check, name = _INIT_TXN, transactional_id
    else:
        check, name = _INIT_IDEMPOTENT, None
    if gate.passes(check, name):
        return Ruling(gate.denials)
    return gate.refuse(check.error)


(_OFFSET_FOR_LEADER_EPOCH,) = _checks(ApiKey.OFFSET_FOR_LEADER_EPOCH)


def _offset_for_leader_epoch(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    check = _OFFSET_FOR_LEADER_EPOCH
    if gate.sees(_on_cluster_only(check), CLUSTER_NAME):
        return Ruling(gate.denials)
    allowed, denied = _split(gate, check, body["topics"], lambda t: t["topic"])
    return _each(
        gate,
        body,
        denied,
        "topics",
        allowed,
        "topics",
        lambda t: {
            "topic": t["topic"],
            "partitions": _partitions_with(
                (p["partition"] for p in t["partitions"]),
                check.error,
                "partition",
                leader_epoch=-1,
                end_offset=-1,
            ),
        },
        lambda: {"throttle_time_ms": 0, "topics": []},
    )


_ADD_PARTITIONS_CLUSTER, _ADD_PARTITIONS_TXN, _ADD_PARTITIONS_TOPICS = _checks(
    ApiKey.ADD_PARTITIONS_TO_TXN
)


def _add_partitions_to_txn(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    if version >= 4:  # brokers verifying a transaction (KIP-890)
        if gate.passes(_ADD_PARTITIONS_CLUSTER):
            return Ruling(gate.denials)
        return gate.refuse(_ADD_PARTITIONS_CLUSTER.error)
    if not gate.passes(_ADD_PARTITIONS_TXN, body["v3_and_below_transactional_id"]):
        return gate.refuse(_ADD_PARTITIONS_TXN.error)
    topics = body["v3_and_below_topics"]
    denied = {
        t["name"]
        for t in topics
        if not gate.passes(_ADD_PARTITIONS_TOPICS, t["name"])  # one pass, one denial each
    }
    if not denied:
        return Ruling(gate.denials)
    # Nothing is added: the denied topics say why, the others were not attempted.
    results = [
        {
            "name": t["name"],
            "results_by_partition": [
                {
                    "partition_index": index,
                    "partition_error_code": _ADD_PARTITIONS_TOPICS.error
                    if t["name"] in denied
                    else ErrorCode.OPERATION_NOT_ATTEMPTED,
                }
                for index in t["partitions"]
            ],
        }
        for t in topics
    ]
    return Ruling(
        gate.denials, answer={"throttle_time_ms": 0, "results_by_topic_v3_and_below": results}
    )


_ADD_OFFSETS_TXN, _ADD_OFFSETS_GROUP = _checks(ApiKey.ADD_OFFSETS_TO_TXN)


def _add_offsets_to_txn(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    if not gate.passes(_ADD_OFFSETS_TXN, body["transactional_id"]):
        return gate.refuse(_ADD_OFFSETS_TXN.error)
    if not gate.passes(_ADD_OFFSETS_GROUP, body["group_id"]):
        return gate.refuse(_ADD_OFFSETS_GROUP.error)
    return Ruling(gate.denials)


(_END_TXN,) = _checks(ApiKey.END_TXN)


def _end_txn(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    if gate.passes(_END_TXN, body["transactional_id"]):
        return Ruling(gate.denials)
    return gate.refuse(_END_TXN.error)


def _cluster_only(api_key: int) -> Callable[[_Gate, int, Body, BrokerView], Ruling]:
    (check,) = _checks(api_key)

    def rule(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
        if gate.passes(check):
            return Ruling(gate.denials)
        return gate.refuse(check.error)

    return rule


_TXN_COMMIT_TXN, _TXN_COMMIT_GROUP, _TXN_COMMIT_TOPICS = _checks(ApiKey.TXN_OFFSET_COMMIT)


def _txn_offset_commit(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    if not gate.passes(_TXN_COMMIT_TXN, body["transactional_id"]):
        return gate.refuse(_TXN_COMMIT_TXN.error)
    if not gate.passes(_TXN_COMMIT_GROUP, body["group_id"]):
        return gate.refuse(_TXN_COMMIT_GROUP.error)
    return _topic_partitions_each(gate, _TXN_COMMIT_TOPICS, body)


def _configs(api_key: int) -> Callable[[_Gate, int, Body, BrokerView], Ruling]:
    broker_check, topic_check, group_check = _checks(api_key)
    by_type = {
        CONFIG_BROKER: broker_check,
        CONFIG_BROKER_LOGGER: broker_check,
        CONFIG_TOPIC: topic_check,
        CONFIG_GROUP: group_check,
    }
    describing = api_key == ApiKey.DESCRIBE_CONFIGS
    answer_key = "results" if describing else "responses"

    def rule(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
        allowed: list[Body] = []
        denied: list[tuple[Body, ErrorCode]] = []
        for resource in body["resources"]:
            check = by_type.get(resource["resource_type"])
            # Other types are the handler's to refuse (INVALID_REQUEST).
            if check is None or gate.passes(check, resource["resource_name"]):
                allowed.append(resource)
            else:
                denied.append((resource, check.error))
        if not denied:
            return Ruling(gate.denials)

        def entry(item: tuple[Body, ErrorCode]) -> Body:
            resource, error = item
            result: Body = {
                "error_code": error,
                "error_message": None,
                "resource_type": resource["resource_type"],
                "resource_name": resource["resource_name"],
            }
            if describing:
                result["configs"] = []
            return result

        return _each(
            gate,
            body,
            denied,
            "resources",
            allowed,
            answer_key,
            entry,
            lambda: {"throttle_time_ms": 0, answer_key: []},
        )

    return rule


(_CREATE_PARTITIONS,) = _checks(ApiKey.CREATE_PARTITIONS)


def _create_partitions(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    check = _CREATE_PARTITIONS
    allowed, denied = _split(gate, check, body["topics"], lambda t: t["name"])
    return _each(
        gate,
        body,
        denied,
        "topics",
        allowed,
        "results",
        lambda t: {"name": t["name"], "error_code": check.error, "error_message": None},
        lambda: {"throttle_time_ms": 0, "results": []},
    )


(_DELETE_GROUPS,) = _checks(ApiKey.DELETE_GROUPS)


def _delete_groups(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    check = _DELETE_GROUPS
    allowed, denied = _split(gate, check, body["groups_names"], lambda g: g)
    return _each(
        gate,
        body,
        denied,
        "groups_names",
        allowed,
        "results",
        lambda g: {"group_id": g, "error_code": check.error},
        lambda: {"throttle_time_ms": 0, "results": []},
    )


_OFFSET_DELETE_GROUP, _OFFSET_DELETE_TOPICS = _checks(ApiKey.OFFSET_DELETE)


def _offset_delete(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    if not gate.passes(_OFFSET_DELETE_GROUP, body["group_id"]):
        return gate.refuse(_OFFSET_DELETE_GROUP.error)
    return _topic_partitions_each(
        gate,
        _OFFSET_DELETE_TOPICS,
        body,
        empty=lambda: {"error_code": 0, "throttle_time_ms": 0, "topics": []},
    )


(_DESCRIBE_PRODUCERS,) = _checks(ApiKey.DESCRIBE_PRODUCERS)


def _describe_producers(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    check = _DESCRIBE_PRODUCERS
    allowed, denied = _split(gate, check, body["topics"], lambda t: t["name"])
    return _each(
        gate,
        body,
        denied,
        "topics",
        allowed,
        "topics",
        lambda t: {
            "name": t["name"],
            "partitions": _partitions_with(
                t["partition_indexes"], check.error, error_message=None, active_producers=[]
            ),
        },
        lambda: {"throttle_time_ms": 0, "topics": []},
    )


_DESCRIBE_TXNS, _DESCRIBE_TXNS_TOPICS = _checks(ApiKey.DESCRIBE_TRANSACTIONS)


def _describe_transactions(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    check = _DESCRIBE_TXNS
    allowed, denied = _split(gate, check, body["transactional_ids"], lambda t: t)
    entries = [
        {
            "error_code": check.error,
            "transactional_id": transactional_id,
            "transaction_state": "",
            "transaction_timeout_ms": 0,
            "transaction_start_time_ms": -1,
            "producer_id": -1,
            "producer_epoch": -1,
            "topics": [],
        }
        for transactional_id in denied
    ]

    def finish(answer: Body) -> Body:
        states = list(answer.get("transaction_states") or ())
        for state in states:  # the topics of a transaction: only those it may describe
            state["topics"] = [
                topic
                for topic in state.get("topics") or ()
                if gate.sees(_DESCRIBE_TXNS_TOPICS, topic["topic"])
            ]
        answer["transaction_states"] = states + entries
        return answer

    if not allowed and denied:
        return Ruling(gate.denials, answer=finish({"throttle_time_ms": 0}))
    served = {**body, "transactional_ids": allowed} if denied else None
    return Ruling(gate.denials, body=served, finish=finish)


(_LIST_TXNS,) = _checks(ApiKey.LIST_TRANSACTIONS)


def _list_transactions(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    return Ruling(
        gate.denials,
        finish=_filter_topics(gate, _LIST_TXNS, "transaction_states", "transactional_id"),
    )


(_CONSUMER_GROUP_DESCRIBE,) = _checks(ApiKey.CONSUMER_GROUP_DESCRIBE)


def _consumer_group_describe(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    check = _CONSUMER_GROUP_DESCRIBE
    allowed, denied = _split(gate, check, body["group_ids"], lambda g: g)
    return _each(
        gate,
        body,
        denied,
        "group_ids",
        allowed,
        "groups",
        lambda g: {
            "error_code": check.error,
            "error_message": None,
            "group_id": g,
            "group_state": "",
            "group_epoch": 0,
            "assignment_epoch": 0,
            "assignor_name": "",
            "members": [],
            "authorized_operations": NO_AUTHORIZED_OPERATIONS,
        },
        lambda: {"throttle_time_ms": 0, "groups": []},
    )


_DESCRIBE_TOPIC_PARTITIONS, _DESCRIBE_TOPIC_PARTITIONS_ALL = _checks(
    ApiKey.DESCRIBE_TOPIC_PARTITIONS
)


def _describe_topic_partitions(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    topics = body.get("topics") or []
    if not topics:  # all topics
        return Ruling(
            gate.denials, finish=_filter_topics(gate, _DESCRIBE_TOPIC_PARTITIONS_ALL, "topics")
        )
    check = _DESCRIBE_TOPIC_PARTITIONS
    allowed, denied = _split(gate, check, topics, lambda t: t["name"])
    return _each(
        gate,
        body,
        denied,
        "topics",
        allowed,
        "topics",
        lambda t: {
            "error_code": check.error,
            "name": t["name"],
            "topic_id": ZERO_UUID,
            "is_internal": False,
            "partitions": [],
            "topic_authorized_operations": NO_AUTHORIZED_OPERATIONS,
        },
        lambda: {"throttle_time_ms": 0, "topics": [], "next_cursor": None},
    )


def _no_check(gate: _Gate, version: int, body: Body, view: BrokerView) -> Ruling:
    return Ruling(gate.denials)


Rule = Callable[[_Gate, int, Body, BrokerView], Ruling]

RULES: dict[int, Rule] = {
    ApiKey.PRODUCE: _produce,
    ApiKey.FETCH: _fetch,
    ApiKey.LIST_OFFSETS: _list_offsets,
    ApiKey.METADATA: _metadata,
    ApiKey.OFFSET_COMMIT: _offset_commit,
    ApiKey.OFFSET_FETCH: _offset_fetch,
    ApiKey.FIND_COORDINATOR: _find_coordinator,
    ApiKey.JOIN_GROUP: _group_only(ApiKey.JOIN_GROUP),
    ApiKey.HEARTBEAT: _group_only(ApiKey.HEARTBEAT),
    ApiKey.LEAVE_GROUP: _group_only(ApiKey.LEAVE_GROUP),
    ApiKey.SYNC_GROUP: _group_only(ApiKey.SYNC_GROUP),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: _group_only(ApiKey.CONSUMER_GROUP_HEARTBEAT),
    ApiKey.DESCRIBE_GROUPS: _describe_groups,
    ApiKey.LIST_GROUPS: _list_groups,
    ApiKey.API_VERSIONS: _no_check,
    ApiKey.SASL_HANDSHAKE: _no_check,
    ApiKey.SASL_AUTHENTICATE: _no_check,
    ApiKey.CREATE_TOPICS: _create_topics,
    ApiKey.DELETE_TOPICS: _delete_topics,
    ApiKey.DELETE_RECORDS: _delete_records,
    ApiKey.INIT_PRODUCER_ID: _init_producer_id,
    ApiKey.OFFSET_FOR_LEADER_EPOCH: _offset_for_leader_epoch,
    ApiKey.ADD_PARTITIONS_TO_TXN: _add_partitions_to_txn,
    ApiKey.ADD_OFFSETS_TO_TXN: _add_offsets_to_txn,
    ApiKey.END_TXN: _end_txn,
    ApiKey.WRITE_TXN_MARKERS: _cluster_only(ApiKey.WRITE_TXN_MARKERS),
    ApiKey.TXN_OFFSET_COMMIT: _txn_offset_commit,
    ApiKey.DESCRIBE_CONFIGS: _configs(ApiKey.DESCRIBE_CONFIGS),
    ApiKey.ALTER_CONFIGS: _configs(ApiKey.ALTER_CONFIGS),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _configs(ApiKey.INCREMENTAL_ALTER_CONFIGS),
    ApiKey.DESCRIBE_LOG_DIRS: _cluster_only(ApiKey.DESCRIBE_LOG_DIRS),
    ApiKey.CREATE_PARTITIONS: _create_partitions,
    ApiKey.DELETE_GROUPS: _delete_groups,
    ApiKey.ELECT_LEADERS: _cluster_only(ApiKey.ELECT_LEADERS),
    ApiKey.OFFSET_DELETE: _offset_delete,
    ApiKey.DESCRIBE_PRODUCERS: _describe_producers,
    ApiKey.DESCRIBE_TRANSACTIONS: _describe_transactions,
    ApiKey.LIST_TRANSACTIONS: _list_transactions,
    ApiKey.CONSUMER_GROUP_DESCRIBE: _consumer_group_describe,
    ApiKey.DESCRIBE_TOPIC_PARTITIONS: _describe_topic_partitions,
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _cluster_only(ApiKey.DESCRIBE_CLIENT_QUOTAS),
    ApiKey.DESCRIBE_CLUSTER: _no_check,  # cluster_authorized_operations only, when asked
    ApiKey.ALTER_PARTITION: _cluster_only(ApiKey.ALTER_PARTITION),
    ApiKey.BROKER_REGISTRATION: _cluster_only(ApiKey.BROKER_REGISTRATION),
    ApiKey.BROKER_HEARTBEAT: _cluster_only(ApiKey.BROKER_HEARTBEAT),
    ApiKey.ALLOCATE_PRODUCER_IDS: _cluster_only(ApiKey.ALLOCATE_PRODUCER_IDS),
    DESCRIBE_ACLS: _cluster_only(DESCRIBE_ACLS),
    CREATE_ACLS: _cluster_only(CREATE_ACLS),
    DELETE_ACLS: _cluster_only(DELETE_ACLS),
    DESCRIBE_USER_SCRAM_CREDENTIALS: _cluster_only(DESCRIBE_USER_SCRAM_CREDENTIALS),
    ALTER_USER_SCRAM_CREDENTIALS: _cluster_only(ALTER_USER_SCRAM_CREDENTIALS),
}


def rule(api_key: int, version: int, body: Body, requester: Requester, view: BrokerView) -> Ruling:
    """What authorization makes of one request (see the module docstring). An API this module
    has no rule for is refused with CLUSTER_AUTHORIZATION_FAILED unless the requester is a super
    user: a request nobody decided about must not slip through."""
    gate = _Gate(api_key, requester, view.authorizer)
    decide = RULES.get(api_key)
    if decide is None:
        if requester.principal in view.authorizer.super_users:
            return Ruling(gate.denials)
        gate.denials.append(
            Denial(
                api_key,
                AclOperation.ALL,
                ResourceType.CLUSTER,
                CLUSTER_NAME,
                ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            )
        )
        return gate.refuse(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return decide(gate, version, body, view)
