"""ACLs and the authorizer (core/security/acl.py) with Kafka's StandardAuthorizer rules, the
DescribeAcls/DeleteAcls filters, CreateAcls' checks, and the table of what each API checks
(core/security/api_operations.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlog.core.protocol.apis import CONTROLLER_SUPPORTED, SUPPORTED, ApiKey
from rlog.core.protocol.codec import Codec, codec_for
from rlog.core.protocol.errors import ErrorCode
from rlog.core.security.acl import (
    ANY_ACL,
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    AclOperation,
    AclPermissionType,
    Authorizer,
    DecisionReason,
    PatternType,
    ResourceType,
    binding_from_creation,
    deleted_acl_body,
    describe_resources,
    filter_from_body,
    parse_super_users,
    validate_binding,
    validate_filter,
)
from rlog.core.security.api_operations import (
    ALTER_USER_SCRAM_CREDENTIALS,
    API_AUTHORIZATION,
    BY_TYPE,
    CREATE_ACLS,
    DELETE_ACLS,
    DESCRIBE_ACLS,
    DESCRIBE_USER_SCRAM_CREDENTIALS,
    Scope,
    allows,
)
from rlog.core.security.sasl import SASL_AUTHENTICATE, SASL_HANDSHAKE

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
Op = AclOperation
ALICE, BOB, EVERYONE = "User:alice", "User:bob", "User:*"
HOST = "10.0.0.1"


def acl(
    name: str,
    operation: AclOperation = Op.READ,
    permission: AclPermissionType = ALLOW,
    *,
    principal: str = ALICE,
    pattern: PatternType = LIT,
    resource_type: ResourceType = T,
    host: str = "*",
) -> AclBinding:
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def can(
    authorizer: Authorizer,
    operation: AclOperation,
    name: str,
    principal: str = ALICE,
    resource_type: ResourceType = T,
    host: str = HOST,
) -> bool:
    return authorizer.authorize(principal, host, operation, resource_type, name)


def test_wire_codes_are_kafkas() -> None:
    assert [m.value for m in ResourceType] == list(range(8))
    assert (PatternType.ANY, PatternType.MATCH, LIT, PRE) == (1, 2, 3, 4)
    assert (Op.ALL, Op.READ, Op.DESCRIBE, Op.IDEMPOTENT_WRITE, Op.DESCRIBE_TOKENS) == (
        2,
        3,
        8,
        12,
        14,
    )
    assert (DENY, ALLOW) == (2, 3)
    assert ResourceType.from_code(42) is ResourceType.UNKNOWN
    assert PatternType.from_code(9) is PatternType.UNKNOWN
    assert Op.from_code(-1) is Op.UNKNOWN
    assert AclPermissionType.from_code(7) is AclPermissionType.UNKNOWN
    assert Op.from_code(4) is Op.WRITE


def test_deny_beats_allow() -> None:
    authorizer = Authorizer([acl("orders"), acl("orders", Op.READ, DENY)])
    assert not can(authorizer, Op.READ, "orders")
    decision = authorizer.decide(ALICE, HOST, Op.READ, T, "orders")
    assert decision.reason is DecisionReason.DENY_ACL
    assert decision.binding == acl("orders", Op.READ, DENY)


def test_deny_from_a_wildcard_or_prefix_beats_a_literal_allow() -> None:
    assert not can(Authorizer([acl("orders"), acl("*", Op.READ, DENY)]), Op.READ, "orders")
    assert not can(
        Authorizer([acl("orders"), acl("ord", Op.READ, DENY, pattern=PRE)]), Op.READ, "orders"
    )
    everyone_denied = Authorizer([acl("orders"), acl("orders", Op.READ, DENY, principal=EVERYONE)])
    assert not can(everyone_denied, Op.READ, "orders")


def test_deny_all_denies_every_operation() -> None:
    authorizer = Authorizer([acl("orders", Op.ALL), acl("orders", Op.ALL, DENY, host=HOST)])
    for operation in (Op.READ, Op.WRITE, Op.DESCRIBE, Op.DESCRIBE_CONFIGS, Op.DELETE):
        assert not can(authorizer, operation, "orders")
        assert can(authorizer, operation, "orders", host="10.9.9.9")  # the deny is per host


def test_allow_all_allows_every_operation() -> None:
    authorizer = Authorizer([acl("orders", Op.ALL)])
    assert all(can(authorizer, op, "orders") for op in (Op.READ, Op.WRITE, Op.ALTER_CONFIGS))


@pytest.mark.parametrize(
    ("granted", "implied"),
    [
        (Op.READ, Op.DESCRIBE),
        (Op.WRITE, Op.DESCRIBE),
        (Op.DELETE, Op.DESCRIBE),
        (Op.ALTER, Op.DESCRIBE),
        (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS),
    ],
)
def test_allows_imply_describe(granted: AclOperation, implied: AclOperation) -> None:
    assert can(Authorizer([acl("orders", granted)]), implied, "orders")
    # A DENY implies nothing: DENY READ leaves DESCRIBE to the ALLOWs.
    both = Authorizer([acl("orders", implied), acl("orders", granted, DENY)])
    assert can(both, implied, "orders")


def test_implications_go_one_way() -> None:
    assert not can(Authorizer([acl("orders", Op.DESCRIBE)]), Op.READ, "orders")
    assert not can(Authorizer([acl("orders", Op.CREATE)]), Op.DESCRIBE, "orders")
    assert not can(Authorizer([acl("orders", Op.DESCRIBE_CONFIGS)]), Op.ALTER_CONFIGS, "orders")
    assert not can(Authorizer([acl("orders", Op.READ)]), Op.DESCRIBE_CONFIGS, "orders")


def test_wildcard_principal_and_host() -> None:
    authorizer = Authorizer([acl("orders", principal=EVERYONE, host=HOST)])
    assert can(authorizer, Op.READ, "orders", BOB)
    assert not can(authorizer, Op.READ, "orders", BOB, host="10.0.0.2")
    # Only User:* is a wildcard: not a principal named "*" of another type.
    assert not can(Authorizer([acl("orders", principal="Group:*")]), Op.READ, "orders")


def test_literal_star_matches_every_resource_of_its_type() -> None:
    authorizer = Authorizer([acl("*")])
    assert can(authorizer, Op.READ, "orders")
    assert can(authorizer, Op.READ, "*")
    assert not can(authorizer, Op.READ, "orders", resource_type=G)


def test_prefixed_patterns() -> None:
    authorizer = Authorizer([acl("team-a.", pattern=PRE), acl("team-b.orders")])
    assert can(authorizer, Op.READ, "team-a.orders")
    assert can(authorizer, Op.READ, "team-a.")
    assert not can(authorizer, Op.READ, "team-a")
    assert not can(authorizer, Op.READ, "team-b.orders-v2")  # a LITERAL is not a prefix
    assert not can(Authorizer([acl("*", pattern=PRE)]), Op.READ, "orders")  # not a wildcard
    assert can(Authorizer([acl("*", pattern=PRE)]), Op.READ, "*orders")


def test_super_users_may_do_anything() -> None:
    authorizer = Authorizer([acl("orders", Op.ALL, DENY, principal=EVERYONE)], super_users=[BOB])
    assert can(authorizer, Op.WRITE, "orders", BOB)
    assert can(authorizer, Op.CLUSTER_ACTION, CLUSTER_NAME, BOB, C)
    assert authorizer.decide(BOB, HOST, Op.READ, T, "x").reason is DecisionReason.SUPER_USER
    assert not can(authorizer, Op.WRITE, "orders")


def test_allow_everyone_if_no_acl_found() -> None:
    closed = Authorizer([acl("orders")])
    open_ = Authorizer([acl("orders")], allow_if_no_acl=True)
    assert not can(closed, Op.WRITE, "payments")
    assert can(open_, Op.WRITE, "payments")
    assert open_.decide(BOB, HOST, Op.WRITE, T, "payments").reason is DecisionReason.NO_ACL_FOUND
    # Once any ACL applies to the resource, for anyone, the flag no longer opens it.
    assert not can(open_, Op.READ, "orders", BOB)
    assert not can(open_, Op.WRITE, "orders")
    decision = open_.decide(BOB, HOST, Op.READ, T, "orders")
    assert decision.reason is DecisionReason.NO_MATCHING_ACL
    assert not Authorizer().authorize(ALICE, HOST, Op.READ, T, "x")
    assert Authorizer(allow_if_no_acl=True).authorize(ALICE, HOST, Op.READ, T, "x")


def test_remove_takes_an_acl_out_of_the_index() -> None:
    authorizer = Authorizer()
    prefixed = acl("team-", pattern=PRE)
    assert authorizer.add(prefixed) and not authorizer.add(prefixed)
    assert authorizer.add(acl("team-", pattern=PRE, principal=BOB))
    assert can(authorizer, Op.READ, "team-x")
    assert authorizer.remove(prefixed) and not authorizer.remove(prefixed)
    assert not can(authorizer, Op.READ, "team-x")
    assert can(authorizer, Op.READ, "team-x", BOB)
    authorizer.remove(acl("team-", pattern=PRE, principal=BOB))
    assert len(authorizer) == 0 and list(authorizer) == []
    assert Authorizer(allow_if_no_acl=True).authorize(ALICE, HOST, Op.READ, T, "team-x")
    with pytest.raises(ValueError):
        authorizer.add(acl("x", pattern=PatternType.MATCH))


def test_authorized_operations_bit_field() -> None:
    authorizer = Authorizer([acl("orders", Op.READ), acl("orders", Op.ALTER_CONFIGS)])
    bits = authorizer.authorized_operations(ALICE, HOST, T, "orders")
    expected = {Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}
    assert bits == sum(1 << op for op in expected)
    assert authorizer.authorized_operations(BOB, HOST, T, "orders") == 0


@pytest.mark.parametrize(
    ("acls", "allowed"),
    [
        ([], False),
        ([acl("t", Op.WRITE)], True),
        ([acl("t", Op.ALL)], True),
        ([acl("t", Op.READ)], False),  # no implied operations here
        ([acl("t", Op.WRITE, principal=BOB)], False),
        ([acl("t", Op.WRITE, principal=EVERYONE)], True),
        ([acl("t", Op.WRITE, host="10.0.0.9")], False),
        ([acl("t", Op.WRITE), acl("t", Op.WRITE, DENY)], False),
        ([acl("tx", Op.WRITE), acl("t", Op.WRITE, DENY, pattern=PRE)], False),
        ([acl("t", Op.WRITE, pattern=PRE), acl("tx", Op.WRITE, DENY, pattern=PRE)], True),
        ([acl("tx", Op.WRITE, pattern=PRE), acl("t", Op.WRITE, DENY, pattern=PRE)], False),
        ([acl("t", Op.WRITE, pattern=PRE), acl("t", Op.WRITE, DENY)], True),
        ([acl("t", Op.WRITE), acl("u", Op.WRITE), acl("t", Op.WRITE, DENY)], True),
        ([acl("*", Op.WRITE)], True),
        ([acl("t", Op.WRITE), acl("*", Op.WRITE, DENY)], False),
        ([acl("t", Op.WRITE, resource_type=G)], False),
    ],
)
def test_authorize_by_resource_type(acls: list[AclBinding], allowed: bool) -> None:
    authorizer = Authorizer(acls)
    assert authorizer.authorize_by_resource_type(ALICE, HOST, Op.WRITE, T) is allowed


def test_authorize_by_resource_type_for_super_users_and_the_no_acl_default() -> None:
    assert Authorizer(super_users=[ALICE]).authorize_by_resource_type(ALICE, HOST, Op.WRITE, T)
    assert Authorizer(allow_if_no_acl=True).authorize_by_resource_type(ALICE, HOST, Op.WRITE, T)


# --- filters (DescribeAcls, DeleteAcls) ---

LITERAL_ORDERS = acl("orders")
LITERAL_STAR = acl("*", Op.WRITE)
PREFIX_ORD = acl("ord", pattern=PRE)
PREFIX_X = acl("x", pattern=PRE, principal=BOB)
GROUP_ORDERS = acl("orders", resource_type=G, principal=BOB, host=HOST, permission=DENY)
ALL_ACLS = [LITERAL_ORDERS, LITERAL_STAR, PREFIX_ORD, PREFIX_X, GROUP_ORDERS]


@pytest.mark.parametrize(
    ("acl_filter", "expected"),
    [
        (ANY_ACL, ALL_ACLS),
        (AclFilter(resource_type=T), [LITERAL_ORDERS, LITERAL_STAR, PREFIX_ORD, PREFIX_X]),
        (AclFilter(resource_name="orders"), [LITERAL_ORDERS, GROUP_ORDERS]),
        (AclFilter(resource_name="ord"), [PREFIX_ORD]),  # ANY: names compared exactly
        (AclFilter(pattern_type=PRE), [PREFIX_ORD, PREFIX_X]),
        (AclFilter(resource_name="orders", pattern_type=PRE), []),
        (AclFilter(resource_name="*", pattern_type=LIT), [LITERAL_STAR]),
        # MATCH: what would apply to a topic named "orders".
        (
            AclFilter(resource_type=T, resource_name="orders", pattern_type=PatternType.MATCH),
            [LITERAL_ORDERS, LITERAL_STAR, PREFIX_ORD],
        ),
        (AclFilter(resource_type=T, pattern_type=PatternType.MATCH), ALL_ACLS[:4]),
        (AclFilter(principal=BOB), [PREFIX_X, GROUP_ORDERS]),
        (AclFilter(host=HOST), [GROUP_ORDERS]),
        (AclFilter(operation=Op.WRITE), [LITERAL_STAR]),
        (AclFilter(permission=DENY), [GROUP_ORDERS]),
    ],
)
def test_filters(acl_filter: AclFilter, expected: list[AclBinding]) -> None:
    authorizer = Authorizer(ALL_ACLS)
    assert set(authorizer.matching(acl_filter)) == set(expected)


def test_delete_acls_is_matching_then_remove() -> None:
    authorizer = Authorizer(ALL_ACLS)
    doomed = authorizer.matching(AclFilter(resource_type=T, principal=ALICE))
    for binding in doomed:
        authorizer.remove(binding)
    assert set(authorizer) == {PREFIX_X, GROUP_ORDERS}
    assert not can(authorizer, Op.READ, "orders")


def test_filters_with_unknown_fields_are_invalid() -> None:
    assert validate_filter(ANY_ACL) == (ErrorCode.NONE, "")
    for bad in (
        AclFilter(resource_type=ResourceType.UNKNOWN),
        AclFilter(pattern_type=PatternType.UNKNOWN),
        AclFilter(operation=Op.UNKNOWN),
        AclFilter(permission=AclPermissionType.UNKNOWN),
    ):
        assert validate_filter(bad)[0] == ErrorCode.INVALID_REQUEST


# --- CreateAcls checks ---


@pytest.mark.parametrize(
    "binding",
    [
        acl("orders", resource_type=ResourceType.ANY),
        acl("orders", resource_type=ResourceType.UNKNOWN),
        acl("orders", pattern=PatternType.MATCH),
        acl("orders", pattern=PatternType.ANY),
        acl("orders", Op.ANY),
        acl("orders", Op.UNKNOWN),
        acl("orders", permission=AclPermissionType.ANY),
        acl("orders", permission=AclPermissionType.UNKNOWN),
        acl(""),
        acl("my-cluster", Op.ALTER, resource_type=C),
        acl("orders", principal="alice"),
        acl("orders", principal=":alice"),
    ],
)
def test_invalid_acls_are_refused(binding: AclBinding) -> None:
    error, message = validate_binding(binding)
    assert error == ErrorCode.INVALID_REQUEST
    assert message


def test_valid_acls_pass() -> None:
    for binding in (
        acl("orders"),
        acl("team-", Op.ALL, DENY, pattern=PRE, principal=EVERYONE),
        acl(CLUSTER_NAME, Op.IDEMPOTENT_WRITE, resource_type=C),
        acl("txn-1", Op.WRITE, resource_type=ResourceType.TRANSACTIONAL_ID, host=HOST),
    ):
        assert validate_binding(binding) == (ErrorCode.NONE, "")


def test_parse_super_users() -> None:
    assert parse_super_users(" User:admin; User:broker ;;") == {"User:admin", "User:broker"}
    assert parse_super_users("") == frozenset()
    with pytest.raises(ValueError):
        parse_super_users("User:admin;broker")


# --- authorize against a brute-force reference ---

NAMES = ["a", "ab", "abc", "b", "*", ""]
_acls = st.builds(
    AclBinding,
    resource_type=st.sampled_from([T, G]),
    resource_name=st.sampled_from(NAMES[:5]),
    pattern_type=st.sampled_from([LIT, PRE]),
    principal=st.sampled_from([ALICE, BOB, EVERYONE]),
    host=st.sampled_from(["*", HOST, "10.0.0.2"]),
    operation=st.sampled_from([op for op in Op if op > Op.ANY]),
    permission=st.sampled_from([ALLOW, DENY]),
)


def reference(
    acls: list[AclBinding],
    super_users: set[str],
    allow_if_no_acl: bool,
    principal: str,
    host: str,
    operation: AclOperation,
    resource_type: ResourceType,
    name: str,
) -> bool:
    """The rules, read off Kafka's documentation, applied to every ACL in turn."""
    if principal in super_users:
        return True
    applying = [
        a
        for a in acls
        if a.resource_type == resource_type
        and (
            (a.pattern_type == LIT and a.resource_name in (name, "*"))
            or (a.pattern_type == PRE and name.startswith(a.resource_name))
        )
    ]
    if not applying:
        return allow_if_no_acl

    def matches(a: AclBinding) -> bool:
        if a.principal not in (principal, EVERYONE) or a.host not in (host, "*"):
            return False
        if a.operation in (Op.ALL, operation):
            return True
        describes = {Op.READ, Op.WRITE, Op.DELETE, Op.ALTER}
        return a.permission == ALLOW and (
            (operation == Op.DESCRIBE and a.operation in describes)
            or (operation == Op.DESCRIBE_CONFIGS and a.operation == Op.ALTER_CONFIGS)
        )

    matched = [a for a in applying if matches(a)]
    if any(a.permission == DENY for a in matched):
        return False
    return any(a.permission == ALLOW for a in matched)


@settings(max_examples=300, deadline=None)
@given(
    acls=st.lists(_acls, max_size=25),
    removed=st.lists(st.integers(0, 24), max_size=5),
    super_user=st.booleans(),
    allow_if_no_acl=st.booleans(),
    queries=st.lists(
        st.tuples(
            st.sampled_from([ALICE, BOB]),
            st.sampled_from([HOST, "10.0.0.2"]),
            st.sampled_from([op for op in Op if op > Op.ANY]),
            st.sampled_from([T, G]),
            st.sampled_from([*NAMES, "abcd", "ba"]),
        ),
        min_size=1,
        max_size=10,
    ),
)
def test_authorize_agrees_with_a_brute_force_reference(
    acls: list[AclBinding],
    removed: list[int],
    super_user: bool,
    allow_if_no_acl: bool,
    queries: list[tuple[str, str, AclOperation, ResourceType, str]],
) -> None:
    super_users = {BOB} if super_user else set()
    authorizer = Authorizer(acls, super_users=super_users, allow_if_no_acl=allow_if_no_acl)
    for index in removed:  # the index must stay right as ACLs go
        if index < len(acls):
            authorizer.remove(acls[index])
    remaining = list(set(authorizer))
    assert set(remaining) == set(acls) - {acls[i] for i in removed if i < len(acls)}
    for query in queries:
        expected = reference(remaining, super_users, allow_if_no_acl, *query)
        assert authorizer.authorize(*query) is expected, query
    # MATCH filters find exactly the ACLs that apply to a resource.
    for _, _, _, resource_type, name in queries:
        match = AclFilter(resource_type, name, PatternType.MATCH)
        applying = {
            a
            for a in remaining
            if a.resource_type == resource_type
            and (
                (a.pattern_type == LIT and a.resource_name in (name, "*"))
                or (a.pattern_type == PRE and name.startswith(a.resource_name))
            )
        }
        assert set(authorizer.matching(match)) == applying


# --- the wire: request bodies in, answer bodies out ---


def codec(name: str, version: int) -> Codec:
    return codec_for(name, version)


def test_create_acls_request_to_bindings() -> None:
    creations = [
        {
            "resource_type": 2,
            "resource_name": "team-",
            "resource_pattern_type": 4,
            "principal": "User:alice",
            "host": "*",
            "operation": 3,
            "permission_type": 3,
        },
        {
            "resource_type": 99,
            "resource_name": "x",
            "resource_pattern_type": 3,
            "principal": "User:alice",
            "host": "*",
            "operation": 3,
            "permission_type": 3,
        },
    ]
    request = codec("CreateAclsRequest", 3)
    body, _ = request.decode(request.encode({"creations": creations}))
    bindings = [binding_from_creation(c) for c in body["creations"]]
    assert bindings[0] == acl("team-", pattern=PRE)
    assert bindings[1].resource_type is ResourceType.UNKNOWN
    assert validate_binding(bindings[1])[0] == ErrorCode.INVALID_REQUEST
    # v0 has no pattern type: the codec's default is LITERAL, as Kafka's.
    v0 = codec("CreateAclsRequest", 0)
    body, _ = v0.decode(v0.encode({"creations": creations[:1]}))
    assert binding_from_creation(body["creations"][0]).pattern_type is LIT


def test_describe_acls_request_and_answer() -> None:
    request = codec("DescribeAclsRequest", 0)
    wire = request.encode(
        {
            "resource_type_filter": 2,
            "resource_name_filter": None,
            "principal_filter": "User:alice",
            "host_filter": None,
            "operation": 1,
            "permission_type": 1,
        }
    )
    acl_filter = filter_from_body(request.decode(wire)[0])
    assert acl_filter == AclFilter(resource_type=T, pattern_type=LIT, principal=ALICE)
    authorizer = Authorizer(ALL_ACLS)
    found = authorizer.matching(acl_filter)
    assert set(found) == {LITERAL_ORDERS, LITERAL_STAR}
    resources = describe_resources(authorizer.matching(ANY_ACL))
    assert [(r["resource_type"], r["resource_name"], r["pattern_type"]) for r in resources] == [
        (T, "*", LIT),
        (T, "ord", PRE),
        (T, "orders", LIT),
        (T, "x", PRE),
        (G, "orders", LIT),
    ]
    for version in (1, 2, 3):
        answer = codec("DescribeAclsResponse", version)
        body = {"throttle_time_ms": 0, "error_code": 0, "error_message": None}
        decoded, _ = answer.decode(answer.encode({**body, "resources": resources}))
        assert decoded["resources"][1]["acls"] == [
            {"principal": ALICE, "host": "*", "operation": 3, "permission_type": 3}
        ]


def test_delete_acls_answer_encodes() -> None:
    answer = codec("DeleteAclsResponse", 3)
    results = [
        {
            "error_code": 0,
            "error_message": None,
            "matching_acls": [deleted_acl_body(b) for b in ALL_ACLS],
        }
    ]
    decoded, _ = answer.decode(answer.encode({"throttle_time_ms": 0, "filter_results": results}))
    assert len(decoded["filter_results"][0]["matching_acls"]) == len(ALL_ACLS)


# --- what each API checks ---


def test_every_served_api_has_its_authorization() -> None:
    served = set(SUPPORTED) | set(CONTROLLER_SUPPORTED)
    security = {
        SASL_HANDSHAKE,
        SASL_AUTHENTICATE,
        DESCRIBE_ACLS,
        CREATE_ACLS,
        DELETE_ACLS,
        DESCRIBE_USER_SCRAM_CREDENTIALS,
        ALTER_USER_SCRAM_CREDENTIALS,
    }
    assert served | security <= set(API_AUTHORIZATION)
    # Beyond those, only APIs rlog knows (DescribeCluster, DescribeClientQuotas: not served yet).
    assert set(API_AUTHORIZATION) <= set(ApiKey) | security


def test_the_table_is_well_formed() -> None:
    denials = {
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        ErrorCode.GROUP_AUTHORIZATION_FAILED,
        ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    }
    for api, authorization in API_AUTHORIZATION.items():
        for check in authorization.checks:
            assert check.error in denials, api
            assert check.any_of, api
            for grant in check.any_of:
                assert grant.resource_type > ResourceType.ANY
                assert grant.operation > Op.ANY
                if grant.resource_type == C:
                    assert grant.names == CLUSTER_NAME
    assert API_AUTHORIZATION[ApiKey.API_VERSIONS].checks == ()
    produce = API_AUTHORIZATION[ApiKey.PRODUCE].checks
    assert [(c.any_of[0].operation, c.any_of[0].resource_type) for c in produce] == [
        (Op.WRITE, ResourceType.TRANSACTIONAL_ID),
        (Op.WRITE, T),
    ]
    assert API_AUTHORIZATION[CREATE_ACLS].checks[0].scope is Scope.REQUEST


def test_allows_tries_each_grant() -> None:
    create = API_AUTHORIZATION[ApiKey.CREATE_TOPICS].checks[0]
    topic_creator = Authorizer([acl("team-", Op.CREATE, pattern=PRE)])
    assert allows(topic_creator, ALICE, HOST, create, "team-orders")
    assert not allows(topic_creator, ALICE, HOST, create, "orders")
    cluster_creator = Authorizer([acl(CLUSTER_NAME, Op.CREATE, resource_type=C)])
    assert allows(cluster_creator, ALICE, HOST, create, "orders")

    idempotent = API_AUTHORIZATION[ApiKey.INIT_PRODUCER_ID].checks[1]
    assert idempotent.any_of[1].names == BY_TYPE
    assert allows(Authorizer([acl("orders", Op.WRITE)]), ALICE, HOST, idempotent)
    assert not allows(Authorizer([acl("orders", Op.READ)]), ALICE, HOST, idempotent)
    with pytest.raises(ValueError):
        allows(topic_creator, ALICE, HOST, API_AUTHORIZATION[ApiKey.LIST_OFFSETS].checks[0])
