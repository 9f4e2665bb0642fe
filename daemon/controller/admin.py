"""Admin APIs, as brokers forward them from clients: CreateTopics, DeleteTopics,
CreatePartitions, ElectLeaders, IncrementalAlterConfigs, and CreateAcls, DeleteAcls and
AlterUserScramCredentials (whose bodies core/controller/security_admin.py maps).

Each maps the Kafka body to the controller's requests and the answers back into the body a
Kafka client expects from a broker at that version (per-topic, per-partition and per-resource
error codes and messages). Checks that need the request as a whole (duplicates, operations rlog
does not offer) are answered here, without bothering the controller.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from rlog.core.controller import (
    AlterConfigsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsResponse,
    CreatePartitionsRequest,
    CreateTopicResult,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteAclsResponse,
    DeleteTopicResult,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ErrorResponse,
    NewTopic,
    security_admin,
)
from rlog.core.protocol.connection import Request
from rlog.core.protocol.errors import ErrorCode
from rlog.daemon.controller.service import ControllerService

Body = dict[str, Any]

# Kafka's ElectionType and ConfigResource.Type and AlterConfigOp.OpType numbers.
ELECTION_PREFERRED = 0
ELECTION_UNCLEAN = 1
ELECTION_KINDS = {ELECTION_PREFERRED: "preferred", ELECTION_UNCLEAN: "unclean"}
RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
CONFIG_SET = 0
CONFIG_DELETE = 1


class AdminHandlers:
    def __init__(self, service: ControllerService) -> None:
        self.service = service

    # -- CreateTopics ----------------------------------------------------------------------
    async def create_topics(self, request: Request) -> Body:
        body = request.body
        counts = Counter(topic["name"] for topic in body["topics"])
        refused: dict[int, CreateTopicResult] = {}
        new_topics: list[NewTopic] = []
        for position, topic in enumerate(body["topics"]):
            new_topic = _new_topic(topic)
            if isinstance(new_topic, CreateTopicResult) and counts[topic["name"]] == 1:
                refused[position] = new_topic
            elif isinstance(new_topic, CreateTopicResult):  # the controller refuses duplicates
                new_topics.append(NewTopic(topic["name"]))
            else:
                new_topics.append(new_topic)
        results: list[CreateTopicResult] = []
        if new_topics:
            response = await self.service.submit(
                lambda token: CreateTopicsRequest(token, new_topics, body["validate_only"])
            )
            assert isinstance(response, CreateTopicsResponse)
            results = response.topics
        answers = iter(results)
        topics = []
        for position in range(len(body["topics"])):
            result = refused.get(position) or next(answers)
            topics.append(
                {
                    "name": result.name,
                    "error_code": result.error,
                    "error_message": result.message,
                    "num_partitions": result.num_partitions,
                    "replication_factor": result.replication_factor,
                }
            )
        return {"throttle_time_ms": 0, "topics": topics}

    # -- DeleteTopics ----------------------------------------------------------------------
    async def delete_topics(self, request: Request) -> Body:
        names: list[str] = request.body["topic_names"]
        counts = Counter(names)
        unique = [name for name in names if counts[name] == 1]
        deleted: dict[str, DeleteTopicResult] = {}
        if unique:
            response = await self.service.submit(lambda token: DeleteTopicsRequest(token, unique))
            assert isinstance(response, DeleteTopicsResponse)
            deleted = {result.name: result for result in response.topics}
        responses = []
        for name in names:
            if counts[name] > 1:  # as Kafka: each duplicate is refused, none deleted
                responses.append({"name": name, "error_code": ErrorCode.INVALID_REQUEST})
            else:
                responses.append({"name": name, "error_code": deleted[name].error})
        return {"throttle_time_ms": 0, "responses": responses}

    # -- CreatePartitions ------------------------------------------------------------------
    async def create_partitions(self, request: Request) -> Body:
        body = request.body
        counts = Counter(topic["name"] for topic in body["topics"])
        waits: list[asyncio.Future[Any]] = []
        for topic in body["topics"]:
            problem = _create_partitions_problem(topic, counts)
            if problem is not None:
                waits.append(_answered(problem))
                continue
            waits.append(
                self.service.submit(
                    lambda token, topic=topic: CreatePartitionsRequest(
                        token, topic["name"], topic["count"], body["validate_only"]
                    )
                )
            )
        results = []
        for topic, response in zip(body["topics"], await asyncio.gather(*waits), strict=True):
            assert isinstance(response, ErrorResponse)
            results.append(
                {"name": topic["name"], "error_code": response.error,
                 "error_message": response.message}
            )  # fmt: skip
        return {"throttle_time_ms": 0, "results": results}

    # -- ElectLeaders ----------------------------------------------------------------------
    async def elect_leaders(self, request: Request) -> Body:
        body = request.body
        answer: Body = {"throttle_time_ms": 0, "error_code": ErrorCode.NONE}
        # v0 has no election type: the codec fills in 0, a preferred election.
        kind = ELECTION_KINDS.get(body["election_type"])
        if kind is None:
            return answer | {
                "error_code": ErrorCode.INVALID_REQUEST,
                "replica_election_results": [],
            }
        partitions = None
        if body["topic_partitions"] is not None:
            partitions = [
                (topic["topic"], partition)
                for topic in body["topic_partitions"]
                for partition in topic["partitions"]
            ]
        response = await self.service.submit(
            lambda token: ElectLeadersRequest(token, kind, partitions)
        )
        assert isinstance(response, ElectLeadersResponse)
        by_topic: dict[str, list[Body]] = {}
        for result in response.results:
            by_topic.setdefault(result.topic, []).append(
                {"partition_id": result.partition, "error_code": result.error,
                 "error_message": result.message}
            )  # fmt: skip
        return answer | {
            "replica_election_results": [
                {"topic": topic, "partition_result": results} for topic, results in by_topic.items()
            ]
        }

    # -- IncrementalAlterConfigs -----------------------------------------------------------
    async def incremental_alter_configs(self, request: Request) -> Body:
        body = request.body
        counts = Counter((r["resource_type"], r["resource_name"]) for r in body["resources"])
        waits: list[asyncio.Future[Any]] = []
        for resource in body["resources"]:
            if counts[(resource["resource_type"], resource["resource_name"])] > 1:
                duplicate = ErrorResponse(ErrorCode.INVALID_REQUEST, "Duplicate resource")
                waits.append(_answered(duplicate))
                continue
            change = _config_change(resource, body["validate_only"])
            if isinstance(change, ErrorResponse):
                waits.append(_answered(change))
            else:
                waits.append(self.service.submit(change))
        responses = []
        for resource, response in zip(body["resources"], await asyncio.gather(*waits), strict=True):
            assert isinstance(response, ErrorResponse)
            responses.append(
                {
                    "error_code": response.error,
                    "error_message": response.message,
                    "resource_type": resource["resource_type"],
                    "resource_name": resource["resource_name"],
                }
            )
        return {"throttle_time_ms": 0, "responses": responses}

    # -- CreateAcls, DeleteAcls, AlterUserScramCredentials ---------------------------------
    async def create_acls(self, request: Request) -> Body:
        response = await self.service.submit(security_admin.create_acls_request(request.body))
        assert isinstance(response, CreateAclsResponse)
        return security_admin.create_acls_answer(response)

    async def delete_acls(self, request: Request) -> Body:
        response = await self.service.submit(security_admin.delete_acls_request(request.body))
        assert isinstance(response, DeleteAclsResponse)
        return security_admin.delete_acls_answer(response)

    async def alter_user_scram_credentials(self, request: Request) -> Body:
        make = security_admin.alter_user_scram_credentials_request(request.body)
        response = await self.service.submit(make)
        assert isinstance(response, AlterUserScramCredentialsResponse)
        return security_admin.alter_user_scram_credentials_answer(response)


def _answered(response: Any) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_result(response)
    return future


def _new_topic(topic: Body) -> NewTopic | CreateTopicResult:
    name = topic["name"]
    assignments = None
    if topic["assignments"]:
        assignments = {}
        for assignment in topic["assignments"]:
            index = assignment["partition_index"]
            if index in assignments:
                return CreateTopicResult(
                    name,
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"Partition {index} appears twice in the manual partition assignment",
                )
            assignments[index] = tuple(assignment["broker_ids"])
    configs = {config["name"]: config["value"] for config in topic["configs"]}
    return NewTopic(
        name, topic["num_partitions"], topic["replication_factor"], assignments, configs
    )


def _create_partitions_problem(topic: Body, counts: Counter[str]) -> ErrorResponse | None:
    if counts[topic["name"]] > 1:
        return ErrorResponse(ErrorCode.INVALID_REQUEST, "Duplicate topic in request.")
    if topic["assignments"] is not None:
        return ErrorResponse(
            ErrorCode.INVALID_REPLICA_ASSIGNMENT,
            "rlog places new partitions itself: manual assignments are not supported",
        )
    return None


def _config_change(resource: Body, validate_only: bool) -> Any:
    """A function of the token making the AlterConfigsRequest, or the ErrorResponse to answer."""
    kind, name = resource["resource_type"], resource["resource_name"]
    if kind == RESOURCE_TOPIC:
        resource_type, resource_name = "topic", name
    elif kind == RESOURCE_BROKER:
        if name != "" and not name.isdigit():
            message = f"Broker id must be an integer: {name!r}"
            return ErrorResponse(ErrorCode.INVALID_REQUEST, message)
        # rlog keeps broker configs cluster-wide: a broker's resource is the cluster default.
        resource_type, resource_name = "broker", ""
    else:
        return ErrorResponse(ErrorCode.INVALID_REQUEST, f"Resource type {kind} is not supported")
    keys = Counter(config["name"] for config in resource["configs"])
    duplicated = sorted(key for key, count in keys.items() if count > 1)
    if duplicated:
        return ErrorResponse(
            ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys: {duplicated}"
        )
    changes: dict[str, str | None] = {}
    for config in resource["configs"]:
        operation, key = config["config_operation"], config["name"]
        if operation == CONFIG_SET:
            if config["value"] is None:
                return ErrorResponse(
                    ErrorCode.INVALID_REQUEST, f"Null value not supported for: {key}"
                )
            changes[key] = config["value"]
        elif operation == CONFIG_DELETE:
            changes[key] = None
        else:
            return ErrorResponse(
                ErrorCode.INVALID_REQUEST,
                f"Config operation {operation} on {key} is not supported (only SET and DELETE)",
            )
    return lambda token: AlterConfigsRequest(
        token, resource_type, resource_name, changes, validate_only
    )
