"""The steady small-request load from a Go program (benchmarks/loadgen/, franz-go) instead of
confluent-kafka producer processes.

Why: at 10,000 records/s with linger.ms=0, the Python producers use about 0.6 of a core, on a
2-core machine that also runs the brokers: the client, not the broker, then sets much of the
latency. The Go program sends each record at once too (no linger, no idempotence, many requests
in flight, round-robin over the partitions) for about 0.27 of a core. It is a different client:
franz-go puts what is ready for one broker in one request, so it sends about half as many
Produce requests as librdkafka for the same records (4,700/s against 9,200/s at 10,000/s).

The program is built with ``go build`` on first use into ``~/.cache/rlog/peers/loadgen-<hash>/``,
keyed on a hash of its sources; its modules come from the Go module proxy, pinned by go.sum.

With peers.py's ``--client franz-go`` it gives the other measurements too (``batched``,
``one``, ``e2e``), with the settings of the confluent-kafka runs.

The same program measures JetStream with nats.go (``js_batched``, ``js_one``, ``js_steady``,
``js_e2e``), so that with ``--client franz-go`` JetStream's figures come from a Go client, not
nats-py, which here cannot publish more than about 31,000 msg/s nor hold 10,000 msg/s on an
open loop.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from .common import PeerUnavailable, cache_dir

SOURCE_DIR = Path(__file__).resolve().parents[1] / "loadgen"
CLIENT = "franz-go"  # the name benchmarks print for this client


def _sources() -> list[Path]:
    """What `go build .` reads: the module files and every Go file of the directory (listed,
    so a new file cannot be left out of the cache key)."""
    return [SOURCE_DIR / "go.mod", SOURCE_DIR / "go.sum", *sorted(SOURCE_DIR.glob("*.go"))]


def _source_hash() -> str:
    digest = hashlib.sha256()
    for path in _sources():
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def binary() -> Path:
    """The built program, built on first use and after any change to its sources."""
    home = cache_dir() / f"loadgen-{_source_hash()}"
    built = home / "loadgen"
    if built.exists():
        return built
    go = shutil.which("go")
    if go is None:
        raise PeerUnavailable("go is not installed: the franz-go load generator needs it")
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two benchmarks at once build it once
        if built.exists():
            return built
        partial = home / "loadgen.partial"
        result = subprocess.run(
            [go, "build", "-mod=readonly", "-buildvcs=false", "-trimpath", "-o", str(partial),
             "."],
            cwd=SOURCE_DIR, capture_output=True, text=True, timeout=900,
        )  # fmt: skip
        if result.returncode != 0:
            tail = (result.stdout + result.stderr).strip().splitlines()[-8:]
            raise PeerUnavailable(f"go build of {SOURCE_DIR} failed: {' | '.join(tail)}")
        partial.replace(built)
    return built


def steady(
    bootstrap: str, topic: str, rate: int, seconds: float, partitions: int, acks: str = "all"
) -> dict[str, Any]:
    """Run the open-loop load to its end; its result, with every latency in seconds."""
    argv = [str(binary()), "-brokers", bootstrap, "steady", "-topic", topic, "-acks", acks]
    argv += ["-rate", str(rate), "-seconds", str(seconds), "-partitions", str(partitions)]
    return _run(argv, seconds)


def batched(
    bootstrap: str, topic: str, count: int, producers: int, partitions: int
) -> dict[str, Any]:
    """`count` records from `producers` clients, linger 5 ms (peers' batched settings); wall_s
    runs from the first record to the last acknowledgement."""
    argv = [str(binary()), "-brokers", bootstrap, "batched", "-topic", topic]
    argv += ["-count", str(count), "-publishers", str(producers), "-partitions", str(partitions)]
    return _run(argv, 0)


def one(bootstrap: str, topic: str, count: int) -> dict[str, Any]:
    """`count` records one at a time, each acknowledgement awaited; every latency."""
    argv = [str(binary()), "-brokers", bootstrap, "one", "-topic", topic, "-count", str(count)]
    return _run(argv, 0)


def e2e(bootstrap: str, topic: str, rate: int, seconds: float, partitions: int) -> dict[str, Any]:
    """The open-loop load with a consumer in the same program: each latency runs from the
    record's due time to when the consumer has it (errors: records never consumed)."""
    argv = [str(binary()), "-brokers", bootstrap, "e2e", "-topic", topic]
    argv += ["-rate", str(rate), "-seconds", str(seconds), "-partitions", str(partitions)]
    return _run(argv, seconds + 30)


def js_steady(servers: str, subject: str, rate: int, seconds: float) -> dict[str, Any]:
    """The same open-loop load published to a JetStream stream's `subject` by nats.go."""
    argv = [str(binary()), "-brokers", servers, "js-steady", "-topic", subject]
    argv += ["-rate", str(rate), "-seconds", str(seconds)]
    return _run(argv, seconds)


def js_batched(servers: str, subject: str, count: int, publishers: int) -> dict[str, Any]:
    """`count` messages published asynchronously by `publishers` connections; wall_s runs from
    the first publish to the last acknowledgement."""
    argv = [str(binary()), "-brokers", servers, "js-batched", "-topic", subject]
    argv += ["-count", str(count), "-publishers", str(publishers)]
    return _run(argv, 0)


def js_one(servers: str, subject: str, count: int) -> dict[str, Any]:
    """`count` messages one at a time, each acknowledgement awaited; every latency."""
    argv = [str(binary()), "-brokers", servers, "js-one", "-topic", subject, "-count", str(count)]
    return _run(argv, 0)


def js_e2e(servers: str, subject: str, rate: int, seconds: float) -> dict[str, Any]:
    """The open-loop load with an ordered consumer in the same program: each latency runs from
    the message's due time to its delivery (errors: messages never delivered)."""
    argv = [str(binary()), "-brokers", servers, "js-e2e", "-topic", subject]
    argv += ["-rate", str(rate), "-seconds", str(seconds)]
    return _run(argv, seconds + 30)


def _run(argv: list[str], seconds: float) -> dict[str, Any]:
    # Its output (every latency) goes to a file: a pipe would fill and stall the program.
    with tempfile.TemporaryFile() as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.PIPE, timeout=seconds + 600)
        if done.returncode != 0:
            raise RuntimeError(f"loadgen failed: {done.stderr.decode().strip()}")
        out.seek(0)
        result = json.load(out)
    result["latencies"] = [us / 1e6 for us in result.pop("latencies_us") or []]
    return result
