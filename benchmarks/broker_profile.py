"""Where the brokers spend their CPU under a load: py-spy samples each broker process while a
phase runs, and the functions holding the most samples are listed (self time, and time with
their callees).

py-spy reads the brokers' memory from outside (``--nonblocking``: the brokers are never stopped to
be sampled), so the load and its latencies are barely touched; bench_small_requests.py runs the
profiled phase on its own, after its warm-up and before the measured rounds. The collapsed stacks
it writes (one file per broker) load into speedscope or flamegraph.pl as they are.
"""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from peers.common import Cluster

from rlog.cli.discovery import read_cluster_state

SAMPLES_PER_S = 250


def broker_pids(cluster: Cluster) -> dict[int, int]:
    """Broker id -> pid of each running broker, from rlogd's status file in the data dir."""
    state = read_cluster_state(cluster.root / "data")
    if state is None:
        return {}
    return {b.id: b.pid for b in state.brokers if b.id is not None and b.pid is not None}


@dataclass(frozen=True)
class Profile:
    samples: int
    self_share: list[tuple[str, float]]  # function, share of the samples it is the leaf of
    total_share: dict[str, float]  # function, share of the samples it is anywhere in


def read_collapsed(path: Path, top: int = 25) -> Profile:
    """Summarize py-spy's raw output: lines of `frame;frame;...;leaf count`, each frame a
    function (`--function`: named by its first line, so its lines add up)."""
    leaf: Counter[str] = Counter()
    anywhere: Counter[str] = Counter()
    samples = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = stack.split(";")
        samples += count
        leaf[frames[-1]] += count
        for frame in set(frames):
            anywhere[frame] += count
    if samples == 0:
        return Profile(0, [], {})
    return Profile(
        samples,
        [(frame, n / samples) for frame, n in leaf.most_common(top)],
        {frame: n / samples for frame, n in anywhere.items()},
    )


def profile_phase(
    cluster: Cluster, out_dir: Path, seconds: float, phase: Callable[[], Any]
) -> dict[int, Profile]:
    """Run `phase` (which lasts about `seconds`) with py-spy sampling every broker; one collapsed
    stack file per broker in `out_dir`. SystemExit if py-spy is not installed."""
    spy = shutil.which("py-spy")
    if spy is None:
        raise SystemExit("--profile needs py-spy: pip install py-spy (the bench extra has it)")
    out_dir.mkdir(parents=True, exist_ok=True)
    pids = broker_pids(cluster)
    recorders = {}
    for broker, pid in pids.items():
        command = [spy, "record", "--pid", str(pid), "--nonblocking", "--function"]
        command += ["--format", "raw"]
        command += ["--rate", str(SAMPLES_PER_S), "--duration", str(max(1, round(seconds)))]
        command += ["--output", str(out_dir / f"broker-{broker}.txt")]
        recorders[broker] = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
    try:
        phase()
    finally:
        for recorder in recorders.values():
            try:
                recorder.wait(timeout=seconds + 30)
            except subprocess.TimeoutExpired:
                recorder.kill()
                recorder.wait()
    return {
        broker: read_collapsed(out_dir / f"broker-{broker}.txt")
        for broker in recorders
        if (out_dir / f"broker-{broker}.txt").exists()
    }


def report(profiles: dict[int, Profile], lines: int = 15) -> str:
    out = []
    for broker, profile in profiles.items():
        out.append(f"broker {broker}: {profile.samples} samples")
        out.append("  self  total  (share of samples; frame)")
        for frame, share in profile.self_share[:lines]:
            out.append(f"  {share:5.1%} {profile.total_share[frame]:6.1%}  {frame}")
    return "\n".join(out)
