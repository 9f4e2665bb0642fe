"""SCRAM credentials in the metadata log: AlterUserScramCredentials, as Kafka's
ScramControlManager decides.

Each user named gets one result, and a user's changes are all or nothing:
- A user named twice in one request (twice among the deletions, twice among the upsertions, or
  in both, whatever the mechanisms) is answered DUPLICATE_RESOURCE and nothing of theirs
  changes. As in Kafka, a user whose first change was already refused keeps that refusal.
- An empty name is UNACCEPTABLE_CREDENTIAL; a mechanism code other than 1 (SCRAM-SHA-256) or 2
  (SCRAM-SHA-512) is UNSUPPORTED_SASL_MECHANISM.
- A deletion of a credential that does not exist is RESOURCE_NOT_FOUND.
- An upsertion needs 4096..16384 iterations (UNACCEPTABLE_CREDENTIAL otherwise). rlog also
  refuses, with UNACCEPTABLE_CREDENTIAL, what no client can log in with or what would only
  bloat the log: an empty salt or one over SALT_MAX_BYTES, and a salted password whose length
  is not the mechanism's digest size (Hi() gives exactly that). Kafka stores those as given.
- The stored credential is the salt, the iterations and the two keys derived from the salted
  password (`credential_from_salted_password`); the password never reaches the controller.

Results come in the order users were first named (deletions first, as the request lists them);
Kafka's come in hash-map order, and clients match them by name. Describing credentials is the
brokers' (`security_admin.describe_user_scram_credentials`, from their image).
"""

from __future__ import annotations

from rlog.core.controller.acls import MAX_RECORDS_PER_USER_OP
from rlog.core.controller.api import (
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsResponse,
    ScramDeletion,
    ScramUpsertion,
    ScramUserResult,
)
from rlog.core.controller.state import ControllerState
from rlog.core.metadata.records import RemoveUserScramCredential, UserScramCredential
from rlog.core.protocol.errors import ErrorCode
from rlog.core.security.scram import (
    ScramCredential,
    ScramMechanism,
    credential_from_salted_password,
    validate_upsertion,
    validate_user_and_mechanism,
)

SALT_MAX_BYTES = 1024  # Kafka's tools send ~26 bytes, librdkafka 64

Refusal = tuple[int, str]
DUPLICATE: Refusal = (
    ErrorCode.DUPLICATE_RESOURCE,
    "A user credential cannot be altered twice in the same request",
)


def handle_alter_user_scram_credentials(
    state: ControllerState, request: AlterUserScramCredentialsRequest, now_ms: int
) -> AlterUserScramCredentialsResponse:
    named: dict[str, None] = {}  # users in the order first named
    refused: dict[str, Refusal] = {}
    accepted: dict[str, ScramDeletion | ScramUpsertion] = {}
    changes: list[ScramDeletion | ScramUpsertion] = [*request.deletions, *request.upsertions]
    for change in changes:
        name = change.name
        named.setdefault(name)
        if name in refused:
            continue
        if accepted.pop(name, None) is not None:
            refused[name] = DUPLICATE
            continue
        if isinstance(change, ScramDeletion):
            problem = _deletion_problem(state, change)
        else:
            problem = _upsertion_problem(change)
        if problem is None:
            accepted[name] = change
        else:
            refused[name] = problem
    if len(accepted) > MAX_RECORDS_PER_USER_OP:
        message = (
            f"Cannot alter more than {MAX_RECORDS_PER_USER_OP} credentials in a single request"
        )
        return AlterUserScramCredentialsResponse(
            [ScramUserResult(name, ErrorCode.INVALID_REQUEST, message) for name in named]
        )
    results: list[ScramUserResult] = []
    for name in named:
        if name in refused:
            results.append(ScramUserResult(name, *refused[name]))
            continue
        change = accepted[name]
        if isinstance(change, ScramDeletion):
            state.emit(RemoveUserScramCredential(name, change.mechanism))
        else:
            state.emit(UserScramCredential.of(name, _credential(change)))
        results.append(ScramUserResult(name, ErrorCode.NONE))
    return AlterUserScramCredentialsResponse(results)


def _deletion_problem(state: ControllerState, deletion: ScramDeletion) -> Refusal | None:
    error, message = validate_user_and_mechanism(deletion.name, deletion.mechanism)
    if error != ErrorCode.NONE:
        return error, message
    mechanism = ScramMechanism.from_code(deletion.mechanism)
    if (deletion.name, mechanism) not in state.image.scram_credentials:
        return (
            ErrorCode.RESOURCE_NOT_FOUND,
            "Attempt to delete a user credential that does not exist",
        )
    return None


def _upsertion_problem(upsertion: ScramUpsertion) -> Refusal | None:
    error, message = validate_upsertion(upsertion.name, upsertion.mechanism, upsertion.iterations)
    if error != ErrorCode.NONE:
        return error, message
    mechanism = ScramMechanism.from_code(upsertion.mechanism)
    assert mechanism is not None  # validate_upsertion refuses unknown codes
    if not 0 < len(upsertion.salt) <= SALT_MAX_BYTES:
        return (
            ErrorCode.UNACCEPTABLE_CREDENTIAL,
            f"The salt must be 1 to {SALT_MAX_BYTES} bytes long",
        )
    if len(upsertion.salted_password) != mechanism.digest_size:
        return (
            ErrorCode.UNACCEPTABLE_CREDENTIAL,
            f"A {mechanism.mechanism_name} salted password is {mechanism.digest_size} bytes long",
        )
    return None


def _credential(upsertion: ScramUpsertion) -> ScramCredential:
    mechanism = ScramMechanism.from_code(upsertion.mechanism)
    assert mechanism is not None
    return credential_from_salted_password(
        mechanism, upsertion.salt, upsertion.salted_password, upsertion.iterations
    )
