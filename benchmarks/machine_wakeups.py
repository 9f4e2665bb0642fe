"""What waking a process costs on this machine: the floor under every small request.

    python benchmarks/machine_wakeups.py

Two processes play ping-pong with 100-byte messages over a loopback TCP connection: one echoes,
the other sends and waits for the echo, each asleep in recv() between messages, as a broker and
its client are between small requests. It prints the round trip and the CPU each side spends
per message (user and system), then the same with the echoing side polling (never asleep), which
shows what the sleeping and waking itself costs, and last with both asleep again but on one
CPU, which shows what waking a process on another CPU costs.

Each small Produce wakes the leader and the client, and with acks=all each follower and the
leader again: on a virtual machine, where waking a process on an idle virtual CPU goes through
the hypervisor, that can cost more than the Python that serves the request. On the 2-core
machine the benchmarks ran on, runs gave 115-190 µs per round trip and 46-72 µs of CPU per
side, against 29-46 µs and 14-25 µs for the sender with the echoing side polling. Machines
differ by more than that, which is one reason the same benchmark gives such different
latencies on them. bench_request_cost.py prints the first and last lines before its own.

On one CPU the same ping-pong gave 19-26 µs per round trip and 9-12 µs of CPU per side there:
the machine is a KVM guest that does not poll before it halts an idle virtual CPU
(haltpoll.guest_halt_poll_ns=0 on its kernel command line), so most of the cost of a wake-up
is the interrupt that wakes another virtual CPU. ``--broker-cpus`` in the rlog benchmarks and
``--server-cpus`` in peers.py put the servers on chosen CPUs to measure that.

Run as root, it plays the ping-pong a fourth time across the CPUs with a wake-up latency limit
of 0 µs held on /dev/cpu_dma_latency (peers.common.awake_cpus): idle CPUs then poll instead of
halting. There it gave 14.7-16.5 µs per round trip and 8-10 µs of CPU per side, against 80-107
µs and 31-45 µs in the same minutes without. ``--awake-cpus`` in the benchmarks does the same.
"""

from __future__ import annotations

import argparse
import os
import socket
import time
from dataclasses import dataclass

from peers.common import CPU_LATENCY_QOS, awake_cpus, servers_on

MESSAGE = b"x" * 100


@dataclass(frozen=True)
class PingPong:
    round_trip_us: float
    sender_cpu_us: float  # per message, user + system
    sender_system_us: float
    echo_cpu_us: float
    echo_system_us: float


def ping_pong(messages: int, echo_polls: bool, same_cpu: bool = False) -> PingPong:
    """`messages` round trips between this process and a forked echo; `echo_polls`: the echo
    reads without ever sleeping (a busy loop) instead of blocking in recv(); `same_cpu`: both
    run on one CPU, so each wakes the other without an interrupt to another CPU."""
    if same_cpu:
        with servers_on(frozenset({min(os.sched_getaffinity(0))})):  # the echo forked inherits it
            return ping_pong(messages, echo_polls)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    port = listener.getsockname()[1]
    report_read, report_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the echo
        try:
            connection = socket.create_connection(("127.0.0.1", port))
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            connection.setblocking(not echo_polls)
            before = os.times()
            for _ in range(messages):
                while True:
                    try:
                        data = connection.recv(len(MESSAGE))
                        break
                    except BlockingIOError:
                        continue
                connection.sendall(data)
            after = os.times()
            cpu = (after.user - before.user) + (after.system - before.system)
            os.write(report_write, f"{cpu} {after.system - before.system}".encode())
        finally:
            os._exit(0)
    os.close(report_write)
    try:
        sock, _ = listener.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        started, before = time.perf_counter(), os.times()
        for _ in range(messages):
            sock.sendall(MESSAGE)
            received = 0
            while received < len(MESSAGE):
                received += len(sock.recv(len(MESSAGE)))
        elapsed, after = time.perf_counter() - started, os.times()
        echo_cpu, echo_system = (float(x) for x in os.read(report_read, 100).split())
    finally:
        os.waitpid(pid, 0)
        os.close(report_read)
        listener.close()
    per = 1e6 / messages
    return PingPong(
        round_trip_us=elapsed * per,
        sender_cpu_us=((after.user - before.user) + (after.system - before.system)) * per,
        sender_system_us=(after.system - before.system) * per,
        echo_cpu_us=echo_cpu * per,
        echo_system_us=echo_system * per,
    )


def describe(result: PingPong, label: str) -> str:
    return (
        f"{label:28} round trip {result.round_trip_us:6.1f} µs; CPU per message: sender "
        f"{result.sender_cpu_us:5.1f} µs ({result.sender_system_us:5.1f} system), echo "
        f"{result.echo_cpu_us:5.1f} µs ({result.echo_system_us:5.1f} system)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    args = parser.parse_args()
    print(describe(ping_pong(args.messages, echo_polls=False), "both asleep between messages"))
    print(describe(ping_pong(args.messages, echo_polls=True), "the echo polling"))
    same_cpu = ping_pong(args.messages, echo_polls=False, same_cpu=True)
    print(describe(same_cpu, "both asleep, on one CPU"))
    if os.access(CPU_LATENCY_QOS, os.W_OK):
        with awake_cpus():
            awake = ping_pong(args.messages, echo_polls=False)
        print(describe(awake, "both asleep, idle CPUs poll"))
    else:
        print(f"(idle CPUs polling: not measured, {CPU_LATENCY_QOS} needs root)")


if __name__ == "__main__":
    main()
