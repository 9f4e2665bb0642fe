"""The consumer group protocol's (KIP-848) server-side assignors and member reconciliation,
alone: the properties Kafka documents for them, checked on random groups."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rlog.core.groups.reconciliation import (
    UNOWNED,
    MemberAssignment,
    MemberState,
    reconcile,
)
from rlog.core.groups.server_assignors import MemberSpec, assign, assign_range, assign_uniform

TOPICS = ["a", "b", "c"]


def spec(member_id: str, topics: set[str], **current: set[int]) -> MemberSpec:
    return MemberSpec(member_id, frozenset(topics), {t: frozenset(p) for t, p in current.items()})


def loads(result: dict[str, dict[str, frozenset[int]]]) -> dict[str, int]:
    return {m: sum(len(p) for p in a.values()) for m, a in result.items()}


def owners(result: dict[str, dict[str, frozenset[int]]]) -> dict[tuple[str, int], list[str]]:
    found: dict[tuple[str, int], list[str]] = {}
    for member, assignment in result.items():
        for topic, partitions in assignment.items():
            for partition in partitions:
                found.setdefault((topic, partition), []).append(member)
    return found


groups = st.builds(
    lambda counts, subs, seeds: (
        dict(zip(TOPICS, counts, strict=True)),
        [
            MemberSpec(f"m{i}", frozenset(s), {t: frozenset(p) for t, p in seed.items()})
            for i, (s, seed) in enumerate(zip(subs, seeds, strict=False))
        ],
    ),
    st.lists(st.integers(0, 7), min_size=3, max_size=3),
    st.lists(st.sets(st.sampled_from(TOPICS), min_size=1), min_size=1, max_size=5),
    st.lists(
        st.dictionaries(st.sampled_from(TOPICS), st.sets(st.integers(0, 8), max_size=4)),
        min_size=5,
        max_size=5,
    ),
)


@settings(max_examples=300, deadline=None)
@given(groups, st.sampled_from(["uniform", "range"]))
def test_every_partition_goes_to_exactly_one_subscriber(group, name) -> None:
    partitions, members = group
    result = assign(name, members, partitions)
    assert set(result) == {m.member_id for m in members}
    subscribed = {m.member_id: m.topics for m in members}
    wanted = {
        (t, p) for t in set().union(*(m.topics for m in members)) for p in range(partitions[t])
    }
    found = owners(result)
    assert set(found) == wanted
    for (topic, _partition), holders in found.items():
        assert len(holders) == 1
        assert topic in subscribed[holders[0]]


@settings(max_examples=300, deadline=None)
@given(groups)
def test_uniform_is_balanced_among_the_members_that_could_take_a_partition(group) -> None:
    partitions, members = group
    result = assign_uniform(members, partitions)
    load = loads(result)
    for member, assignment in result.items():
        for topic in assignment:
            for other in members:
                if topic in other.topics:
                    assert load[other.member_id] >= load[member] - 1, (member, other.member_id)


@settings(max_examples=200, deadline=None)
@given(groups)
def test_uniform_is_sticky_once_balanced_and_moves_little_when_a_member_joins(group) -> None:
    partitions, members = group
    members = [MemberSpec(m.member_id, frozenset(TOPICS), {}) for m in members]
    first = assign_uniform(members, partitions)
    settled = [MemberSpec(m.member_id, m.topics, first[m.member_id]) for m in members]
    assert assign_uniform(settled, partitions) == first
    joined = [*settled, MemberSpec("newcomer", frozenset(TOPICS), {})]
    second = assign_uniform(joined, partitions)
    moved = sum(
        len(first[m.member_id].get(t, frozenset()) - second[m.member_id].get(t, frozenset()))
        for m in members
        for t in TOPICS
    )
    assert moved == loads(second)["newcomer"]  # only what the newcomer takes moves


def test_range_co_partitions_as_kafkas_example() -> None:
    members = [spec("M0", {"T1", "T2"}), spec("M1", {"T1", "T2"})]
    assert assign_range(members, {"T1": 3, "T2": 3}) == {
        "M0": {"T1": frozenset({0, 1}), "T2": frozenset({0, 1})},
        "M1": {"T1": frozenset({2}), "T2": frozenset({2})},
    }
    static = [
        MemberSpec("M3", frozenset({"T1"}), {}, instance_id="I1"),
        MemberSpec("M2", frozenset({"T1"}), {}, instance_id="I0"),
    ]
    assert assign_range(static, {"T1": 3}) == {
        "M2": {"T1": frozenset({0, 1})},
        "M3": {"T1": frozenset({2})},
    }


def test_topics_that_do_not_exist_are_left_out() -> None:
    members = [spec("m", {"a", "gone"})]
    assert assign_uniform(members, {"a": 2}) == {"m": {"a": frozenset({0, 1})}}


# ---- reconciliation ----


def as_partitions(pairs: set[tuple[str, int]]) -> dict[str, frozenset[int]]:
    grouped: dict[str, set[int]] = {}
    for topic, partition in pairs:
        grouped.setdefault(topic, set()).add(partition)
    return {t: frozenset(p) for t, p in grouped.items()}


def test_a_member_gives_up_before_another_gets_and_epochs_move_once_it_has() -> None:
    old = MemberAssignment(MemberState.STABLE, 1, 0, {"a": frozenset({0, 1})})
    new = MemberAssignment(MemberState.STABLE, 0, -1, {})
    # Epoch 2: the newcomer is to get a-1 from old.
    target = {"old": {"a": frozenset({0})}, "new": {"a": frozenset({1})}}
    owner = {("a", 0): 1, ("a", 1): 1}
    old = reconcile(old, 2, target["old"], {"a": frozenset({0, 1})}, lambda t, p: owner[t, p])
    assert old.state is MemberState.UNREVOKED_PARTITIONS
    assert (old.member_epoch, old.pending_revocation) == (1, {"a": frozenset({1})})
    new = reconcile(new, 2, target["new"], {}, lambda t, p: owner.get((t, p), UNOWNED))
    assert new.state is MemberState.UNRELEASED_PARTITIONS
    assert (new.member_epoch, new.assigned) == (2, {})
    # old still lists a-1: nothing moves.
    again = reconcile(old, 2, target["old"], {"a": frozenset({0, 1})}, lambda t, p: 1)
    assert again == old
    # old revoked it: epoch 2, stable; a-1 is free and goes to new.
    old = reconcile(old, 2, target["old"], {"a": frozenset({0})}, lambda t, p: 1)
    assert (old.state, old.member_epoch, old.previous_member_epoch) == (MemberState.STABLE, 2, 1)
    del owner[("a", 1)]
    new = reconcile(new, 2, target["new"], {}, lambda t, p: owner.get((t, p), UNOWNED))
    assert (new.state, new.assigned) == (MemberState.STABLE, {"a": frozenset({1})})


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_no_partition_is_ever_owned_twice_and_every_member_converges(data) -> None:
    """Members with random targets over several epochs, heartbeating in a random order and
    revoking when told: at no point do two members own one partition, and all end STABLE
    owning their targets."""
    names = [f"m{i}" for i in range(data.draw(st.integers(2, 4)))]
    universe = [(t, p) for t in ("a", "b") for p in range(4)]
    members = {n: MemberAssignment() for n in names}
    owned: dict[str, set[tuple[str, int]]] = {n: set() for n in names}
    for epoch in range(1, data.draw(st.integers(2, 4)) + 1):
        shuffled = data.draw(st.permutations(universe))
        cuts = sorted(data.draw(st.lists(st.integers(0, len(universe)), min_size=len(names) - 1,
                                         max_size=len(names) - 1)))  # fmt: skip
        bounds = [0, *cuts, len(universe)]
        targets = {n: as_partitions(set(shuffled[bounds[i]:bounds[i + 1]]))
                   for i, n in enumerate(names)}  # fmt: skip
        for _ in range(60):
            name = data.draw(st.sampled_from(names))

            def owner_epoch(topic: str, partition: int, me: str = name) -> int:
                for other, pairs in owned.items():
                    if other != me and (topic, partition) in pairs:
                        return members[other].member_epoch
                return UNOWNED

            before = members[name]
            after = reconcile(before, epoch, targets[name], as_partitions(owned[name]), owner_epoch)
            members[name] = after
            # The member does what it is told: it keeps only its assigned partitions (it gives
            # up pending revocations) and takes what it was given.
            owned[name] = {(t, p) for t, ps in after.assigned.items() for p in ps}
            everyone = [pair for pairs in owned.values() for pair in pairs]
            assert len(everyone) == len(set(everyone)), "a partition owned twice"
        for _ in range(2 * len(names) + 2):  # then everyone heartbeats, in a fixed order
            for n in names:
                members[n] = reconcile(
                    members[n], epoch, targets[n], as_partitions(owned[n]),
                    lambda t, p, me=n: next((members[o].member_epoch for o in names
                                             if o != me and (t, p) in owned[o]), UNOWNED),
                )  # fmt: skip
                owned[n] = {(t, p) for t, ps in members[n].assigned.items() for p in ps}
                everyone = [pair for pairs in owned.values() for pair in pairs]
                assert len(everyone) == len(set(everyone)), "a partition owned twice"
        for n in names:
            assert members[n].state is MemberState.STABLE
            assert members[n].member_epoch == epoch
            assert as_partitions(owned[n]) == {t: p for t, p in targets[n].items() if p}
