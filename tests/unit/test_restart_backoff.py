"""rlogd's wait before restarting a process: crashes in a row back off, kills asked for do not."""

from __future__ import annotations

from rlog.daemon.rlogd.supervisor import HEALTHY_RUN_S, restart_wait_ms

BASE, MAX = 500, 30_000


def waits(exits: list[tuple[float, bool]]) -> list[int]:
    """The wait before each restart, for exits given as (seconds run, asked for)."""
    backoff, found = 0, []
    for ran_s, requested in exits:
        wait, backoff = restart_wait_ms(
            backoff, ran_s, requested=requested, base_ms=BASE, max_ms=MAX
        )
        found.append(wait)
    return found


def test_crashes_in_a_row_double_the_wait_up_to_the_max() -> None:
    assert waits([(0.5, False)] * 9) == [0, 500, 1000, 2000, 4000, 8000, 16000, 30000, 30000]


def test_a_healthy_run_starts_the_backoff_again() -> None:
    assert waits([(0.5, False)] * 4 + [(HEALTHY_RUN_S, False), (0.5, False)]) == [
        0, 500, 1000, 2000, 0, 500,
    ]  # fmt: skip


def test_kills_asked_for_wait_at_most_the_base_and_leave_the_backoff_alone() -> None:
    assert waits([(0.5, True)] * 8) == [0] * 8
    # After crashes, a requested kill waits the base, and the next crash goes on from there.
    assert waits([(0.5, False)] * 4 + [(0.5, True)] * 3 + [(0.5, False)]) == [
        0, 500, 1000, 2000, 500, 500, 500, 4000,
    ]  # fmt: skip
