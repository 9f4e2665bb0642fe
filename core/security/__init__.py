"""Authentication and authorization, sans-IO: what a broker needs for SASL and ACLs.

- `sasl.py`: one connection's SASL state machine (SaslHandshake, SaslAuthenticate, KIP-368).
- `scram.py`, `plain.py`: the SCRAM-SHA-256/512 and PLAIN mechanisms' server sides
  (`mechanism.py` is what they share).
- `acl.py`: ACLs, filters and the `Authorizer` (Kafka's StandardAuthorizer rules).
- `api_operations.py`: the operation and resource each Kafka API checks, and its denial.
- `enforcement.py`: the ruling on one request (which resources are denied; the request and
  answer rewritten for it); `principal.py`: a connection's principal (the SSL subject in RFC
  2253 form); `denials.py`: which denials to journal (one per key per window).

Nothing here reads a clock, draws random numbers or does I/O: time comes in as `now_ms`, and
randomness (SCRAM nonces) from a callable the daemon gives.
"""

from rlog.core.security.acl import (
    ANY_ACL,
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    Decision,
    DecisionReason,
    PatternType,
    ResourceType,
    parse_super_users,
    validate_binding,
    validate_filter,
)
from rlog.core.security.api_operations import API_AUTHORIZATION, ApiAuthorization, Check, Grant
from rlog.core.security.mechanism import AuthenticationFailed, SaslMechanismServer
from rlog.core.security.plain import PlainServer, password_table
from rlog.core.security.sasl import (
    SaslAnswer,
    SaslConfig,
    SaslSession,
    SaslState,
    Verdict,
    standard_mechanisms,
)
from rlog.core.security.scram import (
    ScramCredential,
    ScramMechanism,
    ScramServer,
    credential_from_salted_password,
    new_credential,
)

__all__ = [
    "ANY_ACL",
    "API_AUTHORIZATION",
    "CLUSTER_NAME",
    "AclBinding",
    "AclFilter",
    "AclOperation",
    "AclPermissionType",
    "ApiAuthorization",
    "AuthenticationFailed",
    "Authorizer",
    "Check",
    "Decision",
    "DecisionReason",
    "Grant",
    "PatternType",
    "PlainServer",
    "ResourceType",
    "SaslAnswer",
    "SaslConfig",
    "SaslMechanismServer",
    "SaslSession",
    "SaslState",
    "ScramCredential",
    "ScramMechanism",
    "ScramServer",
    "Verdict",
    "credential_from_salted_password",
    "new_credential",
    "parse_super_users",
    "password_table",
    "standard_mechanisms",
    "validate_binding",
    "validate_filter",
]
