"""The Kafka bodies of the ACL and SCRAM admin APIs: CreateAcls, DeleteAcls and
AlterUserScramCredentials become controller requests (acls.py, scram.py) and their responses
become answers; DescribeAcls and DescribeUserScramCredentials are answered from a metadata
image, as Kafka's brokers answer them from their authorizer and metadata cache.

Pure functions of bodies and images, shared by the controller daemon (which serves the
forwarded requests) and the brokers (which forward them, wait until their image shows the
change, and answer the two Describe APIs themselves).

Kafka's brokers answer SECURITY_DISABLED when no authorizer is configured; rlog always keeps
the ACLs (enforcing them is the request path's business), so these APIs are always served.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from rlog.core.controller.api import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsRequest,
    DeleteAclsResponse,
    ScramDeletion,
    ScramUpsertion,
    Token,
)
from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.security.acl import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    binding_from_creation,
    deleted_acl_body,
    describe_resources,
    filter_from_body,
    validate_filter,
)
from rlog.core.security.scram import ScramMechanism

Body = dict[str, Any]

DESCRIBE_DUPLICATE_USER = (
    "Cannot describe SCRAM credentials for the same user twice in a single request: "
)
DESCRIBE_UNKNOWN_USER = "Attempt to describe a user credential that does not exist: "


# ---- CreateAcls ----


def create_acls_request(body: Body) -> Callable[[Token], CreateAclsRequest]:
    bindings = [binding_from_creation(creation) for creation in body["creations"]]
    return lambda token: CreateAclsRequest(token, bindings)


def create_acls_answer(response: CreateAclsResponse) -> Body:
    return {
        "throttle_time_ms": 0,
        "results": [
            {"error_code": result.error, "error_message": result.message}
            for result in response.results
        ],
    }


def created_acls(body: Body, answer: Body) -> list[AclBinding]:
    """The bindings a CreateAcls answer says are stored."""
    return [
        binding_from_creation(creation)
        for creation, result in zip(body["creations"], answer["results"], strict=True)
        if result["error_code"] == ErrorCode.NONE
    ]


# ---- DeleteAcls ----


def delete_acls_request(body: Body) -> Callable[[Token], DeleteAclsRequest]:
    filters = [filter_from_body(each) for each in body["filters"]]
    return lambda token: DeleteAclsRequest(token, filters)


def delete_acls_answer(response: DeleteAclsResponse) -> Body:
    return {
        "throttle_time_ms": 0,
        "filter_results": [
            {
                "error_code": result.error,
                "error_message": result.message,
                "matching_acls": [deleted_acl_body(binding) for binding in result.deleted],
            }
            for result in response.results
        ],
    }


def deleted_acls(answer: Body) -> list[AclBinding]:
    """The bindings a DeleteAcls answer says were removed."""
    return [
        AclBinding(
            ResourceType.from_code(acl["resource_type"]),
            acl["resource_name"],
            PatternType.from_code(acl["pattern_type"]),
            acl["principal"],
            acl["host"],
            AclOperation.from_code(acl["operation"]),
            AclPermissionType.from_code(acl["permission_type"]),
        )
        for result in answer["filter_results"]
        for acl in result["matching_acls"]
    ]


# ---- DescribeAcls (a broker, from its image) ----


def describe_acls_answer(image: MetadataImage, body: Body) -> Body:
    acl_filter = filter_from_body(body)
    error, message = validate_filter(acl_filter)
    if error != ErrorCode.NONE:
        return {"throttle_time_ms": 0, "error_code": error, "error_message": message,
                "resources": []}  # fmt: skip
    return {
        "throttle_time_ms": 0,
        "error_code": ErrorCode.NONE,
        "error_message": None,
        "resources": describe_resources(image.authorizer.matching(acl_filter)),
    }


# ---- AlterUserScramCredentials ----


def alter_user_scram_credentials_request(
    body: Body,
) -> Callable[[Token], AlterUserScramCredentialsRequest]:
    deletions = [ScramDeletion(each["name"], each["mechanism"]) for each in body["deletions"]]
    upsertions = [
        ScramUpsertion(
            each["name"],
            each["mechanism"],
            each["iterations"],
            bytes(each["salt"]),
            bytes(each["salted_password"]),
        )
        for each in body["upsertions"]
    ]
    return lambda token: AlterUserScramCredentialsRequest(token, deletions, upsertions)


def alter_user_scram_credentials_answer(response: AlterUserScramCredentialsResponse) -> Body:
    return {
        "throttle_time_ms": 0,
        "results": [
            {"user": result.user, "error_code": result.error, "error_message": result.message}
            for result in response.results
        ],
    }


def shows_scram_changes(image: MetadataImage, body: Body, answer: Body) -> bool:
    """Whether `image` holds what an AlterUserScramCredentials answer says was done: each
    deleted credential gone, each upserted one there with its salt and iterations."""
    done = {result["user"] for result in answer["results"] if result["error_code"] == 0}
    for deletion in body["deletions"]:
        key = (deletion["name"], ScramMechanism.from_code(deletion["mechanism"]))
        if deletion["name"] in done and key in image.scram_credentials:
            return False
    for upsertion in body["upsertions"]:
        mechanism = ScramMechanism.from_code(upsertion["mechanism"])
        if upsertion["name"] not in done or mechanism is None:
            continue
        stored = image.scram_credentials.get((upsertion["name"], mechanism))
        if stored is None or stored.salt != bytes(upsertion["salt"]):
            return False
        if stored.iterations != upsertion["iterations"]:
            return False
    return True


# ---- DescribeUserScramCredentials (a broker, from its image) ----


def describe_user_scram_credentials_answer(image: MetadataImage, body: Body) -> Body:
    """Kafka's ScramImage.describe: null or no users means every user with a credential; a
    user asked twice is DUPLICATE_RESOURCE (once), one without credentials RESOURCE_NOT_FOUND.
    Users in the order asked (all users: by name); mechanisms by code."""
    mechanisms: dict[str, list[tuple[ScramMechanism, int]]] = {}
    for (user, mechanism), credential in image.scram_credentials.items():
        mechanisms.setdefault(user, []).append((mechanism, credential.iterations))
    asked = body["users"]
    duplicated: set[str] = set()
    if asked:
        names: dict[str, None] = {}
        for user in asked:
            if user["name"] in names:
                duplicated.add(user["name"])
            names.setdefault(user["name"])
        users: Iterable[str] = names
    else:
        users = sorted(mechanisms)
    results = []
    for user in users:
        result: Body = {"user": user, "error_code": ErrorCode.NONE, "error_message": None,
                        "credential_infos": []}  # fmt: skip
        if user in duplicated:
            result |= {"error_code": ErrorCode.DUPLICATE_RESOURCE,
                       "error_message": DESCRIBE_DUPLICATE_USER + user}  # fmt: skip
        elif user not in mechanisms:
            result |= {"error_code": ErrorCode.RESOURCE_NOT_FOUND,
                       "error_message": DESCRIBE_UNKNOWN_USER + user}  # fmt: skip
        else:
            result["credential_infos"] = [
                {"mechanism": mechanism.code, "iterations": iterations}
                for mechanism, iterations in sorted(mechanisms[user], key=lambda m: m[0].code)
            ]
        results.append(result)
    return {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "error_message": None,
            "results": results}  # fmt: skip


# ---- error answers (the controller did not answer, or a bug) ----


def _create_acls_error(body: Body, code: int, message: str | None) -> Body:
    result = {"error_code": code, "error_message": message}
    return {"throttle_time_ms": 0, "results": [dict(result) for _ in body["creations"]]}


def _delete_acls_error(body: Body, code: int, message: str | None) -> Body:
    return {
        "throttle_time_ms": 0,
        "filter_results": [
            {"error_code": code, "error_message": message, "matching_acls": []}
            for _ in body["filters"]
        ],
    }


def _describe_acls_error(body: Body, code: int, message: str | None) -> Body:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "resources": []}


def _alter_scram_error(body: Body, code: int, message: str | None) -> Body:
    users = dict.fromkeys(each["name"] for each in [*body["deletions"], *body["upsertions"]])
    return {
        "throttle_time_ms": 0,
        "results": [{"user": user, "error_code": code, "error_message": message} for user in users],
    }


def _describe_scram_error(body: Body, code: int, message: str | None) -> Body:
    return {"throttle_time_ms": 0, "error_code": code, "error_message": message, "results": []}


ERROR_ANSWERS: dict[ApiKey, Callable[[Body, int, str | None], Body]] = {
    ApiKey.CREATE_ACLS: _create_acls_error,
    ApiKey.DELETE_ACLS: _delete_acls_error,
    ApiKey.DESCRIBE_ACLS: _describe_acls_error,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _alter_scram_error,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _describe_scram_error,
}


def security_error_answer(
    api_key: ApiKey, body: Body, code: int, message: str | None = None
) -> Body:
    """The answer giving `code` to everything the request named, in its API's shape."""
    return ERROR_ANSWERS[api_key](body, code, message)
