"""The ACL and SCRAM admin APIs at every version the brokers advertise: each request, encoded
at that version and decoded as the server reads it, goes through the controller's rules (or a
broker's image, for the Describe APIs), and the answer names every field of the response
schema at that version and encodes. The error answers too. And the controller daemon's
handlers serve them over a real metadata log, answering a failure in the API's shape."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from test_admin_answers import missing_fields
from unit.test_controller import Driver

from rlog.core.controller import ControllerConfig
from rlog.core.controller.security_admin import (
    ERROR_ANSWERS,
    alter_user_scram_credentials_answer,
    alter_user_scram_credentials_request,
    create_acls_answer,
    create_acls_request,
    delete_acls_answer,
    delete_acls_request,
    describe_acls_answer,
    describe_user_scram_credentials_answer,
    security_error_answer,
)
from rlog.core.metadata.log_store import replay
from rlog.core.protocol.apis import CONTROLLER_SUPPORTED, SUPPORTED, ApiKey
from rlog.core.protocol.codec import codec_for
from rlog.core.protocol.connection import Request
from rlog.core.protocol.errors import ErrorCode
from rlog.core.protocol.schema import load_message
from rlog.core.security.scram import ScramMechanism, salted_password
from rlog.daemon.controller.handlers import Handlers
from rlog.daemon.controller.main import open_metadata_log
from rlog.daemon.controller.service import ControllerService

Body = dict[str, Any]
APIS = (
    ApiKey.CREATE_ACLS,
    ApiKey.DELETE_ACLS,
    ApiKey.DESCRIBE_ACLS,
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
)
CASES = [(api, v) for api in APIS for v in range(SUPPORTED[api][0], SUPPORTED[api][1] + 1)]
SALT = b"0123456789abcdefghijklmnop"


def request(api: ApiKey, version: int, body: Body) -> Body:
    """`body` as a client of that version sends it: encoded at the version, decoded again."""
    codec = codec_for(api.request_schema, version)
    decoded, _end = codec.decode(codec.encode(body))
    return decoded


def creation(
    name: str, pattern: int = 3, resource_type: int = 2, principal: str = "User:a"
) -> Body:
    return {"resource_type": resource_type, "resource_name": name,
            "resource_pattern_type": pattern, "principal": principal, "host": "*",
            "operation": 3, "permission_type": 3}  # fmt: skip


def acl_filter(name: str | None, pattern: int = 3, resource_type: int = 2) -> Body:
    return {"resource_type_filter": resource_type, "resource_name_filter": name,
            "pattern_type_filter": pattern, "principal_filter": None, "host_filter": None,
            "operation": 1, "permission_type": 1}  # fmt: skip


def upsertion(name: str, mechanism: int = 1, iterations: int = 4096) -> Body:
    scram = ScramMechanism.from_code(mechanism) or ScramMechanism.SCRAM_SHA_256
    return {"name": name, "mechanism": mechanism, "iterations": iterations, "salt": SALT,
            "salted_password": salted_password(scram, "pw", SALT, 4096)}  # fmt: skip


class Cluster:
    """A controller with ACLs and credentials, and what it answered to one API's requests."""

    def __init__(self) -> None:
        self.driver = Driver()

    def submit(self, make: Any) -> Any:
        token = object()
        self.driver.controller.step(make(token), self.driver.now_ms)
        responses = dict(self.driver.flush())
        return responses[token]

    def answers(self, api: ApiKey, version: int) -> list[Body]:
        image = self.driver.controller.image
        # v0 has only LITERAL patterns (the field is absent: the codec reads LITERAL).
        prefixed = 4 if version >= 1 else 3
        seed = [creation("orders"), creation("ord", 4), creation("logs", 3, 3)]
        self.submit(create_acls_request({"creations": seed}))
        answers: list[Body] = []
        if api == ApiKey.CREATE_ACLS:
            body = request(api, version, {"creations": [
                creation("t"), creation("ord", prefixed), creation(""), creation("t", 3, 0),
                creation("kafka-cluster", 3, 4)]})  # fmt: skip
            answers.append(create_acls_answer(self.submit(create_acls_request(body))))
        elif api == ApiKey.DELETE_ACLS:
            body = request(api, version, {"filters": [
                acl_filter("orders"), acl_filter(None, 3, 0), acl_filter("ord", prefixed),
                acl_filter(None, 3, 1)]})  # fmt: skip
            answers.append(delete_acls_answer(self.submit(delete_acls_request(body))))
        elif api == ApiKey.DESCRIBE_ACLS:
            for wanted in (acl_filter("orders", 2 if version >= 1 else 3), acl_filter(None, 3, 0)):
                answers.append(describe_acls_answer(image, request(api, version, wanted)))
        elif api == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
            body = request(api, version, {
                "deletions": [{"name": "nobody", "mechanism": 1}, {"name": "x", "mechanism": 7}],
                "upsertions": [upsertion("alice"), upsertion("bob", 2, 8192),
                               upsertion("bob"), upsertion("carol", 1, 100)]})  # fmt: skip
            make = alter_user_scram_credentials_request(body)
            answers.append(alter_user_scram_credentials_answer(self.submit(make)))
        else:
            for users in (None, [{"name": "alice"}, {"name": "zed"}, {"name": "alice"}]):
                body = request(api, version, {"users": users})
                answers.append(describe_user_scram_credentials_answer(image, body))
        return answers


@pytest.mark.parametrize(("api", "version"), CASES, ids=[f"{a.name}-v{v}" for a, v in CASES])
def test_answers_name_every_field_of_their_schema(api: ApiKey, version: int) -> None:
    cluster = Cluster()
    if api == ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS:  # some credentials to describe
        cluster.submit(
            alter_user_scram_credentials_request(
                {"deletions": [], "upsertions": [upsertion("alice"), upsertion("bob", 2)]}
            )
        )
    answers = cluster.answers(api, version)
    response = load_message(api.response_schema).struct
    codec = codec_for(api.response_schema, version)
    for answer in answers:
        assert missing_fields(response, version, answer, api.name, set()) == [], answer
        decoded, _ = codec.decode(codec.encode(answer))
        assert len(decoded) >= 2
    errors = [item for answer in answers for item in _error_codes(answer)]
    assert ErrorCode.NONE in errors and any(code != ErrorCode.NONE for code in errors), errors


def _error_codes(answer: Body) -> list[int]:
    codes = [answer["error_code"]] if "error_code" in answer else []
    for key in ("results", "filter_results"):
        codes += [item["error_code"] for item in answer.get(key, [])]
    return codes


@pytest.mark.parametrize(("api", "version"), CASES, ids=[f"{a.name}-v{v}" for a, v in CASES])
def test_error_answers_name_every_field_of_their_schema(api: ApiKey, version: int) -> None:
    bodies = {
        ApiKey.CREATE_ACLS: {"creations": [creation("a"), creation("b")]},
        ApiKey.DELETE_ACLS: {"filters": [acl_filter("a")]},
        ApiKey.DESCRIBE_ACLS: acl_filter("a"),
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS: {"deletions": [{"name": "a", "mechanism": 1}],
                                              "upsertions": [upsertion("a"), upsertion("b")]},
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: {"users": None},
    }  # fmt: skip
    answer = security_error_answer(api, request(api, version, bodies[api]), 7, "timed out")
    response = load_message(api.response_schema).struct
    assert missing_fields(response, version, answer, api.name, set()) == [], answer
    codec_for(api.response_schema, version).encode(answer)
    assert set(ERROR_ANSWERS) == set(APIS)
    if api == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
        assert [r["user"] for r in answer["results"]] == ["a", "b"]  # one result per user


def test_the_controller_serves_the_changes_and_the_brokers_the_descriptions() -> None:
    changes = {ApiKey.CREATE_ACLS, ApiKey.DELETE_ACLS, ApiKey.ALTER_USER_SCRAM_CREDENTIALS}
    assert changes <= set(CONTROLLER_SUPPORTED)
    assert not {ApiKey.DESCRIBE_ACLS, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS} & set(
        CONTROLLER_SUPPORTED
    )
    for api in changes:
        assert CONTROLLER_SUPPORTED[api] == SUPPORTED[api]
    # SASL is the brokers' (every listener lists it, as Kafka's do); never the controller's.
    assert SUPPORTED[ApiKey.SASL_HANDSHAKE] == (0, 1)
    assert SUPPORTED[ApiKey.SASL_AUTHENTICATE] == (0, 2)
    assert not {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE} & set(CONTROLLER_SUPPORTED)


# ---- the controller daemon's handlers, over a real metadata log ------------------------------


def serve(service: ControllerService, api: ApiKey, body: Body) -> Body:
    handlers = Handlers("cluster", service)
    version = CONTROLLER_SUPPORTED[api][1]
    wire = Request(api, version, 1, "broker-1", request(api, version, body), 0)
    return asyncio.run(handlers.handle(wire))


def test_the_controller_daemon_answers_and_replays_what_it_stored(tmp_path: Path) -> None:
    log = open_metadata_log(tmp_path)
    service = ControllerService(Driver(ControllerConfig()).controller, log)
    created = serve(service, ApiKey.CREATE_ACLS, {"creations": [creation("t"), creation("")]})
    assert [r["error_code"] for r in created["results"]] == [0, ErrorCode.INVALID_REQUEST]
    altered = serve(
        service,
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        {"deletions": [], "upsertions": [upsertion("alice")]},
    )
    assert altered["results"] == [{"user": "alice", "error_code": 0, "error_message": None}]
    image = replay(log)
    assert len(image.acls) == 1 and set(image.scram_credentials) == {
        ("alice", ScramMechanism.SCRAM_SHA_256)
    }
    deleted = serve(service, ApiKey.DELETE_ACLS, {"filters": [acl_filter(None, 1, 1)]})
    assert [a["resource_name"] for a in deleted["filter_results"][0]["matching_acls"]] == ["t"]
    assert replay(log).acls == {}
    log.close()


def test_a_failure_in_the_controller_is_answered_in_the_apis_shape(tmp_path: Path) -> None:
    log = open_metadata_log(tmp_path)
    service = ControllerService(Driver(ControllerConfig()).controller, log)

    def broken(make: Any) -> Any:
        raise RuntimeError("a bug")

    service.submit = broken  # type: ignore[method-assign]
    answer = serve(service, ApiKey.DELETE_ACLS, {"filters": [acl_filter("a"), acl_filter("b")]})
    assert [r["error_code"] for r in answer["filter_results"]] == [
        ErrorCode.UNKNOWN_SERVER_ERROR
    ] * 2
    log.close()
