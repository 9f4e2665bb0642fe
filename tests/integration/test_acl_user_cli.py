"""The real ``rlog acl add|list|remove`` and ``rlog user create|list|delete`` against one real
cluster for the module: tables and --json, an error per refused ACL, filters, --dry-run, and
one-line errors with their exit codes. The flag parsing is checked without a cluster first."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from rlog.cli.acl import (
    AddPatternType,
    FilterPatternType,
    Selection,
    bindings_to_add,
    filters_of,
    operation_of,
    principal_of,
    resources_of,
)
from rlog.cli.terminal import CliError, ExitCode
from support.cli_runner import Result, ok, one_line_error, rlog
from support.cluster import Cluster, start_cluster

pytestmark = pytest.mark.integration


# ---- the flags, without a cluster -------------------------------------------------------------


def selection(*, filtering: bool, **flags: list[str]) -> Selection:
    resources = resources_of(flags.get("topic", []), flags.get("group", []), False, [])
    return Selection.of(
        flags.get("allow"),
        flags.get("deny"),
        flags.get("host"),
        flags.get("operation"),
        resources,
        filtering=filtering,
    )


def test_add_makes_one_binding_per_combination_and_needs_each_part() -> None:
    chosen = selection(filtering=False, allow=["alice", "User:bob"], deny=["eve"],
                       operation=["read", "DESCRIBE_CONFIGS"], topic=["t"])  # fmt: skip
    bindings = bindings_to_add(chosen, AddPatternType.PREFIXED)
    assert len(bindings) == 3 * 2
    assert {(b.principal, b.permission_type) for b in bindings} == {
        ("User:alice", AclPermissionType.ALLOW),
        ("User:bob", AclPermissionType.ALLOW),
        ("User:eve", AclPermissionType.DENY),
    }
    assert {b.operation for b in bindings} == {AclOperation.READ, AclOperation.DESCRIBE_CONFIGS}
    assert {(b.host, b.resource_pattern_type) for b in bindings} == {
        ("*", ResourcePatternType.PREFIXED)
    }
    for missing in ("allow", "operation", "topic"):
        flags = {"allow": ["a"], "operation": ["read"], "topic": ["t"]}
        del flags[missing]
        with pytest.raises(CliError) as refused:
            bindings_to_add(selection(filtering=False, **flags), AddPatternType.LITERAL)
        assert refused.value.code is ExitCode.USAGE


def test_filters_match_anything_not_named() -> None:
    (everything,) = filters_of(selection(filtering=True), FilterPatternType.ANY)
    assert (everything.restype, everything.name, everything.principal, everything.host) == (
        ResourceType.ANY,
        None,
        None,
        None,
    )
    assert everything.operation == AclOperation.ANY
    assert everything.permission_type == AclPermissionType.ANY
    some = filters_of(
        selection(filtering=True, topic=["a", "b"], deny=["x"], operation=["any"]),
        FilterPatternType.MATCH,
    )
    assert [(f.name, f.principal, f.permission_type, f.operation) for f in some] == [
        ("a", "User:x", AclPermissionType.DENY, AclOperation.ANY),
        ("b", "User:x", AclPermissionType.DENY, AclOperation.ANY),
    ]
    assert {f.resource_pattern_type for f in some} == {ResourcePatternType.MATCH}


@pytest.mark.parametrize(
    "bad",
    [lambda: principal_of(" "), lambda: principal_of(""), lambda: operation_of("any",
     allow_any=False), lambda: operation_of("fly", allow_any=True),
     lambda: resources_of([""], [], False, [])],
)  # fmt: skip
def test_bad_flags_are_usage_errors(bad) -> None:
    with pytest.raises(CliError) as refused:
        bad()
    assert refused.value.code is ExitCode.USAGE


# ---- against a cluster ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    cluster = start_cluster(tmp_path_factory.mktemp("acl-user-cli") / "data", brokers=1)
    try:
        yield cluster
    finally:
        cluster.stop()


def run(cluster: Cluster, *args: str, stdin: str | None = None) -> Result:
    return rlog(*args, data_dir=cluster.data_dir, stdin=stdin)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def test_acl_add_list_and_remove(cli_cluster: Cluster) -> None:
    topic, user = unique("orders"), unique("alice")
    added = ok(run(cli_cluster, "acl", "add", "--allow-principal", user, "-o", "read",
                   "-o", "describe", "--topic", topic, "--topic", f"{topic}-b"))  # fmt: skip
    lines = added.out.splitlines()
    assert lines[0].split() == [
        "PRINCIPAL", "HOST", "RESOURCE-TYPE", "RESOURCE-NAME", "RESOURCE-PATTERN-TYPE",
        "OPERATION", "PERMISSION", "ERROR",
    ]  # fmt: skip
    assert len(lines) == 5 and all(f"User:{user}" in line for line in lines[1:])
    prefixed = json.loads(ok(run(cli_cluster, "acl", "add", "--deny-principal", f"User:{user}",
                                 "--host", "10.0.0.1", "-o", "write", "--topic", topic[:6],
                                 "--resource-pattern-type", "prefixed", "--json")).out)  # fmt: skip
    assert prefixed == [{"principal": f"User:{user}", "host": "10.0.0.1",
                         "resource_type": "TOPIC", "resource_name": topic[:6],
                         "pattern_type": "PREFIXED", "operation": "WRITE", "permission": "DENY",
                         "error": None}]  # fmt: skip

    # A principal without a type: its row has the cluster's error, the good one is stored.
    mixed = run(cli_cluster, "acl", "add", "--allow-principal", user, "--allow-principal",
                ":nobody", "-o", "alter", "--cluster", "--json")  # fmt: skip
    assert mixed.code == ExitCode.FAILURE and "1 of 2 ACLs were refused" in mixed.err
    verdicts = {row["principal"]: row["error"] for row in json.loads(mixed.out)}
    assert verdicts[f"User:{user}"] is None
    assert verdicts[":nobody"].startswith("INVALID_REQUEST: Invalid principal")

    mine = ["acl", "list", "--allow-principal", user, "--deny-principal", user, "--json"]
    listed = json.loads(ok(run(cli_cluster, *mine)).out)
    assert len(listed) == 6
    matched = ok(run(cli_cluster, "acl", "list", "--topic", topic,
                     "--resource-pattern-type", "match"))  # fmt: skip
    assert len(matched.out.splitlines()) == 1 + 3  # header, read and describe, the prefix

    dry = ok(run(cli_cluster, "acl", "remove", "--topic", topic, "--dry-run"))
    assert len(dry.out.splitlines()) == 3 and "nothing was removed" in dry.err
    removed = ok(run(cli_cluster, "acl", "remove", "--topic", topic, "--allow-principal", user))
    assert len(removed.out.splitlines()) == 3 and "Removed 2 ACLs." in removed.err
    assert len(json.loads(ok(run(cli_cluster, *mine)).out)) == 4

    one_line_error(run(cli_cluster, "acl", "remove", "--json"), ExitCode.USAGE, "name what")
    one_line_error(
        run(cli_cluster, "acl", "add", "--allow-principal", user, "-o", "fly", "--topic", topic),
        ExitCode.USAGE,
        "unknown operation",
    )
    everything = ok(run(cli_cluster, "acl", "remove", "--operation", "any", "--json"))
    assert len(json.loads(everything.out)) >= 4
    assert json.loads(ok(run(cli_cluster, "acl", "list", "--json")).out) == []


def test_user_create_list_and_delete(cli_cluster: Cluster) -> None:
    user = unique("alice")
    created = ok(run(cli_cluster, "user", "create", user, "--password-stdin", stdin="pw one\n"))
    assert created.out.strip() == f"Created user {user} (SCRAM-SHA-256, 4096 iterations)."
    ok(run(cli_cluster, "user", "create", user, "-p", "pw2", "-m", "SCRAM-SHA-512",
           "--iterations", "8192"))  # fmt: skip
    updated = ok(run(cli_cluster, "user", "create", user, "--password", "pw3"))
    assert updated.out.startswith(f"Updated user {user} ")

    listed = ok(run(cli_cluster, "user", "list")).out.splitlines()
    assert listed[0].split() == ["USER", "MECHANISM", "ITERATIONS"]
    assert [line.split() for line in listed if line.startswith(user)] == [
        [user, "SCRAM-SHA-256", "4096"],
        [user, "SCRAM-SHA-512", "8192"],
    ]
    as_json = json.loads(ok(run(cli_cluster, "user", "list", "--json")).out)
    assert {"user": user, "mechanism": "SCRAM-SHA-512", "iterations": 8192} in as_json

    one_line_error(
        run(cli_cluster, "user", "create", unique("bob"), "-p", "x", "--iterations", "100"),
        ExitCode.USAGE,
        "--iterations",
    )
    one_line_error(run(cli_cluster, "user", "create", unique("bob")), ExitCode.USAGE, "password")

    deleted = ok(run(cli_cluster, "user", "delete", user, "-m", "SCRAM-SHA-512"))
    assert deleted.out.strip() == f"Deleted user {user} (SCRAM-SHA-512)."
    one_line_error(
        run(cli_cluster, "user", "delete", user, "-m", "SCRAM-SHA-512"),
        ExitCode.NOT_FOUND,
        "has no SCRAM-SHA-512 credential",
    )
    ok(run(cli_cluster, "user", "delete", user))
    one_line_error(run(cli_cluster, "user", "delete", user), ExitCode.NOT_FOUND, "unknown user")
    assert user not in ok(run(cli_cluster, "user", "list")).out
