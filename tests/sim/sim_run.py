"""Run the replication simulation over many seeds, or replay one.

    python tests/sim/sim_run.py --seeds 5000 [--start 0] [--steps N] [--jobs J]
        runs seeds start..start+seeds-1 in J processes (one per core by default), prints each
        failure (seed, step, invariant, detail, the tail of its trace) and a summary (failures by
        invariant, seeds/s, acks, faults, group commits and rebalances).
    python tests/sim/sim_run.py --seed K --trace [--steps N]
        replays seed K exactly, printing every event as it happens, then its outcome.

Options that match the suite's pinned configuration (see test_sim_replication.py):
    --fetch-versions {mixed,11,12}  the newest Fetch each broker serves: picked per broker start
                                from 11 and 12 (mixed, the default), or all 11, or all 12
    --no-visible-hw             do not check that the HW shown to consumers never moves back
By default everything is checked, so known open bugs show up here as failures.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
from collections import Counter
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sim_cluster import Outcome, SimOptions, run_seed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=100, help="how many seeds to run")
    parser.add_argument("--start", type=int, default=0, help="the first seed")
    parser.add_argument("--steps", type=int, default=SimOptions.steps, help="steps per seed")
    parser.add_argument("--seed", type=int, help="replay this one seed")
    parser.add_argument("--trace", action="store_true", help="with --seed: print every event")
    parser.add_argument("--fetch-versions", choices=("mixed", "11", "12"), default="mixed")
    parser.add_argument("--no-visible-hw", action="store_true")
    parser.add_argument("--tail", type=int, default=25, help="trace lines shown per failure")
    parser.add_argument(
        "--jobs", type=int, default=os.cpu_count() or 1, help="processes (default: one per core)"
    )
    args = parser.parse_args(argv)
    fetch_versions = {"mixed": (11, 12), "11": (11,), "12": (12,)}[args.fetch_versions]
    options = SimOptions(
        steps=args.steps,
        fetch_versions=fetch_versions,
        check_visible_hw=not args.no_visible_hw,
    )
    if args.seed is not None:
        outcome = run_seed(args.seed, options, echo=args.trace)
        print(f"seed {args.seed}: {'ok' if outcome.ok else 'FAILED'} after step {outcome.step}")
        if not outcome.ok:
            print(f"  {outcome.invariant}: {outcome.detail}")
        print(f"  {outcome.summary} trace sha256 {outcome.trace_hash[:16]}")
        return 0 if outcome.ok else 1
    failures: Counter[str] = Counter()
    totals: Counter[str] = Counter()
    started = time.perf_counter()
    seeds = range(args.start, args.start + args.seeds)
    with multiprocessing.Pool(max(1, args.jobs)) as pool:
        outcomes = pool.imap(partial(run_seed, options=options), seeds, chunksize=8)
        for seed, outcome in zip(seeds, outcomes, strict=True):
            report(seed, outcome, args.tail, failures, totals)
    elapsed = time.perf_counter() - started
    print(
        f"{args.seeds} seeds ({args.start}..{args.start + args.seeds - 1}) in {elapsed:.1f} s "
        f"({args.seeds / elapsed:.1f} seeds/s, {args.jobs} jobs): {sum(failures.values())} failed "
        f"{dict(failures)}; acked {totals['acked']}, failed {totals['failed']}, unknown "
        f"{totals['unknown']}, faults {totals['faults']}, group commits acked "
        f"{totals['commits_acked']}, rebalances {totals['rebalances']}, transactions committed "
        f"{totals['txns_committed']}, aborted {totals['txns_aborted']}, consumer-protocol commits "
        f"acked {totals['consumer_commits_acked']}, assignments {totals['consumer_assignments']}, "
        f"zombie overlaps {totals['consumer_zombie_overlaps']}, virtual "
        f"{totals['virtual_ms'] / 1000:.0f} s"
    )
    return 1 if failures else 0


def report(
    seed: int, outcome: Outcome, tail: int, failures: Counter[str], totals: Counter[str]
) -> None:
    totals.update(outcome.summary)
    if outcome.ok:
        return
    failures[outcome.invariant or "?"] += 1
    print(f"FAIL seed {seed} step {outcome.step} {outcome.invariant}: {outcome.detail}")
    for line in outcome.trace_tail[-tail:]:
        print(f"    {line}")
    print(f"    replay: python tests/sim/sim_run.py --seed {seed} --trace", flush=True)


if __name__ == "__main__":
    sys.exit(main())
