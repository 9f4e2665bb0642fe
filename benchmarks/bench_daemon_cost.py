"""What a small Produce costs the broker process around its core, in one process: the listener,
the protocol codec and the driver, counted apart from the core.

    python benchmarks/bench_daemon_cost.py                 # ~20 s
    python benchmarks/bench_daemon_cost.py --window 16 --produces 4000

One broker's real parts on one uvloop event loop, as daemon/broker/main.py puts them together:
a `BrokerCore` on real files through the chaos file system (its health watch on every write),
led partition t-0 (the unit tests' in-process cluster makes it leader), a `BrokerDriver`, and a
`BrokerServer` listening on 127.0.0.1 with the broker's `Faults`. A raw client on the same loop
keeps WINDOW pre-built one-record ProduceRequest v8 frames (acks=1) in flight on one connection
and counts answers by their size prefixes alone, so it runs no codec of its own.

It prints, per Produce, the bytecode instructions run (sys.settrace's opcode events) in three
places: the daemon (rlog/daemon), the protocol (rlog/core/protocol and the codec's generated
functions), and the rest of the core; and this process's CPU time per Produce, which also holds
the client, the kernel's socket work and the time inside C calls. The counts are the same from
run to run at window 1 (within a few instructions: duties on timers), whatever else the machine
runs: the measure for a change to the listener's or the driver's path, as bench_core_cost.py's
is for the core's. ``--functions N`` lists the N functions that ran the most. It leaves out the
wake-ups between processes (machine_wakeups.py), since client and broker share one thread.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import socket
import statistics
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FrameType
from typing import Any

import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from bench_request_cost import produce_frames
from unit.test_broker_core import TOPIC, Cluster

import rlog.core
import rlog.daemon
from rlog.core.protocol.connection import ClientConnection, Request
from rlog.daemon.broker.core_driver import BrokerDriver
from rlog.daemon.broker.faults import ChaosFileSystem, Faults
from rlog.daemon.broker.server import BrokerServer

WINDOW = 1
WARM_UP_PRODUCES = 500
CORE_DIR = str(Path(rlog.core.__file__).parent)
PROTOCOL_DIR = str(Path(rlog.core.__file__).parent / "protocol")
DAEMON_DIR = str(Path(rlog.daemon.__file__).parent)
PLACES = ("daemon", "protocol", "core")


class CoreOnly:
    """The broker's `Handlers` for the requests the core serves: straight to the driver, as
    Handlers.serve_now does; nothing else is asked here."""

    def __init__(self, driver: BrokerDriver) -> None:
        self.driver = driver

    def serve_now(self, request: Request, client_host: str, reply: Callable[..., None]) -> bool:
        body = request.body or {}
        self.driver.submit(
            request.api_key, request.api_version, body, request.client_id, client_host, reply
        )
        return True

    async def handle(self, request: Request) -> None:
        raise AssertionError(f"not served here: api {request.api_key}")


def place_of(filename: str) -> str | None:
    if filename.startswith(PROTOCOL_DIR) or filename.startswith("<codec"):
        return "protocol"
    if filename.startswith(DAEMON_DIR):
        return "daemon"
    if filename.startswith(CORE_DIR):
        return "core"
    return None  # this file's client, asyncio's Python, the standard library


class Counting:
    """sys.settrace over the loop: opcodes per place while `on`."""

    def __init__(self) -> None:
        self.on = False
        self.places: dict[CodeType, str | None] = {}  # place_of each function's file, once
        self.executed: Counter[str] = Counter()
        self.by_function: Counter[tuple[str, str]] = Counter()  # (place, function)

    def trace(self, frame: FrameType, event: str, _arg: object) -> Callable[..., object] | None:
        code = frame.f_code
        if event == "call":
            if code not in self.places:
                self.places[code] = place_of(code.co_filename)
            if not self.on or self.places[code] is None:
                return None
            frame.f_trace_opcodes = True
            frame.f_trace_lines = False
        elif event == "opcode" and self.on:
            place = self.places[code]
            assert place is not None
            self.executed[place] += 1
            self.by_function[place, code.co_qualname] += 1
        return self.trace


async def produce(port: int, frames: list[bytes], window: int) -> None:
    """Send `frames` keeping `window` in flight; wait for as many answers (size prefixes)."""
    loop = asyncio.get_running_loop()
    sock = socket.create_connection(("127.0.0.1", port))
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sent = answered = 0
        buffered = b""
        while answered < len(frames):
            while sent < len(frames) and sent - answered < window:
                await loop.sock_sendall(sock, frames[sent])
                sent += 1
            data = await loop.sock_recv(sock, 1 << 16)
            if not data:
                raise RuntimeError(f"the broker closed the connection after {answered} answers")
            buffered += data
            while len(buffered) >= 4:
                (size,) = struct.unpack_from(">i", buffered)
                if len(buffered) < 4 + size:
                    break
                buffered = buffered[4 + size :]
                answered += 1
    finally:
        sock.close()


def one_record_produces(how_many: int) -> list[bytes]:
    """bench_request_cost's frames (acks=1), to the in-process cluster's topic."""
    return produce_frames(ClientConnection(), how_many, acks=1, topic=TOPIC)


async def measure(root: Path, produces: int, window: int, counting: Counting | None) -> float:
    """CPU µs per Produce (or, with `counting`, the count is in it) on a fresh broker."""
    faults = Faults(None, file_system=ChaosFileSystem())  # as a broker without a faults file
    file_system = faults.file_system
    cluster = Cluster(brokers=(1,), real_files=root, real_file_system=lambda: file_system)
    driver = BrokerDriver(cluster.cores[1], log_dir=file_system.health)
    driver.connect(unreachable, lambda _request, _answer: None)
    server = BrokerServer(CoreOnly(driver), 1 << 20, faults=faults)
    server.listen("127.0.0.1", 0)
    assert server._listener is not None
    port = server._listener.getsockname()[1]
    serving = asyncio.create_task(server.serve())
    try:
        await produce(port, one_record_produces(WARM_UP_PRODUCES), window)
        frames = one_record_produces(produces)
        started = time.process_time()
        if counting is not None:
            counting.on = True
        await produce(port, frames, window)
        if counting is not None:
            counting.on = False
        return (time.process_time() - started) / produces * 1e6
    finally:
        serving.cancel()
        await server.close()
        driver.close()


async def unreachable(_proposal: Any) -> Any:
    raise AssertionError("one broker proposes no ISR change")


def run(produces: int, window: int, counting: Counting | None = None) -> float:
    root = Path(tempfile.mkdtemp(prefix="rlog-daemon-cost-"))
    try:
        if counting is None:
            return uvloop.run(measure(root, produces, window, None))
        sys.settrace(counting.trace)
        try:
            return uvloop.run(measure(root, produces, window, counting))
        finally:
            sys.settrace(None)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="fresh brokers timed")
    parser.add_argument("--produces", type=int, default=4_000, help="measured per run")
    parser.add_argument("--window", type=int, default=WINDOW, help="Produces in flight")
    parser.add_argument(
        "--functions", type=int, default=0, metavar="N", help="also the N functions running most"
    )
    args = parser.parse_args()
    counting = Counting()
    counted = 1_000
    run(counted, args.window, counting)
    per = {place: counting.executed[place] / counted for place in PLACES}
    runs = [run(args.produces, args.window) for _ in range(args.runs)]
    print(
        f"one broker, acks=1, one-record Produce v8, {args.window} in flight, in process "
        f"({args.runs} runs of {args.produces:,})"
    )
    print(
        "  bytecode instructions per Produce: "
        + ", ".join(f"{place} {per[place]:,.0f}" for place in PLACES)
        + f" (total {sum(per.values()):,.0f})"
    )
    print(
        f"  CPU per Produce, client included: min {min(runs):.1f} µs, median "
        f"{statistics.median(runs):.1f} µs (runs: {', '.join(f'{r:.1f}' for r in runs)})"
    )
    for (place, function), executed in counting.by_function.most_common(args.functions):
        print(f"  {executed / counted:7.1f}  {place:8} {function}")


if __name__ == "__main__":
    main()
