"""ACLs in the metadata log: CreateAcls and DeleteAcls, as Kafka's AclControlManager decides.

- CreateAcls checks each binding on its own (`validate_binding`): a bad one is answered with
  its error while the good ones of the same request are stored. A binding already stored, or
  named twice in one request, is stored once and answered with success each time.
- DeleteAcls checks each filter (`validate_filter`) and answers, per filter, every ACL it
  matched in the state before the request: a binding two filters match is listed under both
  and removed once.
- One request writes at most MAX_RECORDS_PER_USER_OP records (Kafka's bound); beyond it the
  request is refused as a whole.

An ACL's id is derived from the offset of the record that creates it: unique in the log and
the same on every replay (Kafka draws a random UUID; the core has no randomness).
"""

from __future__ import annotations

import hashlib

from rlog.core.controller.api import (
    CreateAclsRequest,
    CreateAclsResponse,
    DeleteAclsFilterResult,
    DeleteAclsRequest,
    DeleteAclsResponse,
    ErrorResponse,
)
from rlog.core.controller.state import ControllerState
from rlog.core.metadata.records import AccessControlEntry, RemoveAccessControlEntry
from rlog.core.protocol.errors import ErrorCode
from rlog.core.security.acl import AclBinding, validate_binding, validate_filter

# Kafka's QuorumController.MAX_RECORDS_PER_USER_OP: the most records one admin request writes.
MAX_RECORDS_PER_USER_OP = 10_000


def acl_id_for(offset: int) -> str:
    """An ACL's id (32 hex digits) from the offset of its AccessControlEntry record."""
    return hashlib.sha256(f"acl:{offset}".encode()).hexdigest()[:32]


def binding_order(binding: AclBinding) -> tuple[int, str, int, str, str, int, int]:
    """A stable order for answers: by resource pattern, then by entry."""
    return (
        binding.resource_type,
        binding.resource_name,
        binding.pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission,
    )


def entry_record(acl_id: str, binding: AclBinding) -> AccessControlEntry:
    return AccessControlEntry(
        acl_id,
        int(binding.resource_type),
        binding.resource_name,
        int(binding.pattern_type),
        binding.principal,
        binding.host,
        int(binding.operation),
        int(binding.permission),
    )


def handle_create_acls(
    state: ControllerState, request: CreateAclsRequest, now_ms: int
) -> CreateAclsResponse:
    checked = [validate_binding(binding) for binding in request.bindings]
    new = {
        binding
        for binding, (error, _) in zip(request.bindings, checked, strict=True)
        if error == ErrorCode.NONE and binding not in state.image.acl_ids
    }
    if len(new) > MAX_RECORDS_PER_USER_OP:
        refusal = ErrorResponse(
            ErrorCode.INVALID_REQUEST,
            f"Cannot create more than {MAX_RECORDS_PER_USER_OP} ACLs in a single request",
        )
        return CreateAclsResponse([refusal] * len(request.bindings))
    results: list[ErrorResponse] = []
    for binding, (error, message) in zip(request.bindings, checked, strict=True):
        if error != ErrorCode.NONE:
            results.append(ErrorResponse(error, message))
            continue
        if binding not in state.image.acl_ids:  # a duplicate is stored once, and succeeds
            state.emit(entry_record(acl_id_for(state.next_offset), binding))
        results.append(ErrorResponse(ErrorCode.NONE))
    return CreateAclsResponse(results)


def handle_delete_acls(
    state: ControllerState, request: DeleteAclsRequest, now_ms: int
) -> DeleteAclsResponse:
    authorizer = state.image.authorizer
    results: list[DeleteAclsFilterResult] = []
    doomed: dict[str, None] = {}  # ids in the order first matched: one removal each
    for acl_filter in request.filters:
        error, message = validate_filter(acl_filter)
        if error != ErrorCode.NONE:
            results.append(DeleteAclsFilterResult(error, message))
            continue
        matched = sorted(authorizer.matching(acl_filter), key=binding_order)
        results.append(DeleteAclsFilterResult(ErrorCode.NONE, None, tuple(matched)))
        for binding in matched:
            doomed.setdefault(state.image.acl_ids[binding])
    if len(doomed) > MAX_RECORDS_PER_USER_OP:
        message = f"Cannot remove more than {MAX_RECORDS_PER_USER_OP} ACLs in a single request"
        return DeleteAclsResponse(
            [DeleteAclsFilterResult(ErrorCode.INVALID_REQUEST, message) for _ in request.filters]
        )
    for acl_id in doomed:
        state.emit(RemoveAccessControlEntry(acl_id))
    return DeleteAclsResponse(results)
