"""Where a new partition's replicas go: round-robin over the live brokers, rack-unaware.

The scheme Kafka documents for its rack-unaware assignment: partition p's first replica (its
preferred leader) is broker (start + p) mod n, so leaders rotate; followers follow at a distance
of 1 + (shift + j) mod (n - 1), and the shift grows by one each time the partitions wrap around
the brokers, so followers do not always pair the same way. Kafka picks `start` and `shift` at
random; here they come from a counter in the metadata image, so placement is deterministic and
replays identically.
"""

from __future__ import annotations

from collections.abc import Sequence


def placement_seed(counter: int, broker_count: int) -> tuple[int, int]:
    """(start index, replica shift) for the `counter`-th placement over `broker_count` brokers."""
    assert broker_count >= 1 and counter >= 0
    return counter % broker_count, (counter // broker_count) % broker_count


def assign_replicas(
    broker_ids: Sequence[int],
    partition_count: int,
    replication_factor: int,
    *,
    start_index: int,
    replica_shift: int,
    first_partition: int = 0,
) -> list[tuple[int, ...]]:
    """Replicas of partitions first_partition .. first_partition + partition_count - 1."""
    broker_count = len(broker_ids)
    assert 1 <= replication_factor <= broker_count, (replication_factor, broker_count)
    assert len(set(broker_ids)) == broker_count
    assignment: list[tuple[int, ...]] = []
    shift = replica_shift
    for partition in range(first_partition, first_partition + partition_count):
        if partition > 0 and partition % broker_count == 0:
            shift += 1
        first = (partition + start_index) % broker_count
        followers = [
            broker_ids[_follower_index(first, shift, j, broker_count)]
            for j in range(replication_factor - 1)
        ]
        assignment.append((broker_ids[first], *followers))
    return assignment


def _follower_index(first: int, shift: int, follower: int, broker_count: int) -> int:
    # Distances 1 .. n-1 from the first replica: never the first replica itself, and distinct for
    # the at most n - 1 followers.
    return (first + 1 + (shift + follower) % (broker_count - 1)) % broker_count
