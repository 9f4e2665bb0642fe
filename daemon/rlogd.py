"""rlogd: run a local rlog cluster in the foreground and keep its brokers alive.

`rlogd --brokers N --data-dir DIR [--base-port P] [--config FILE]` starts broker-1..broker-N as
subprocesses (broker-i on 127.0.0.1:P+i-1, its logs in DIR/broker-i), restarts one that dies per
the config's restart policy, and on SIGTERM or SIGINT stops them cleanly (each flushes its logs
and writes its checkpoints). While it runs, DIR/rlogd.json says where everything is; `rlog` reads
it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import fcntl
import json
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlog.daemon.config import ConfigError, RlogConfig, load_config
from rlog.daemon.exit_codes import ExitCode

log = logging.getLogger("rlogd")

HOST = "127.0.0.1"
STATUS_FILE = "rlogd.json"
LAUNCH_FILE = "cluster.json"
LOCK_FILE = "rlogd.lock"
# A broker that stayed up this long has recovered: its next crash starts the backoff again.
HEALTHY_RUN_S = 10.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Runs in the child before exec: if rlogd is killed -9, the kernel stops its brokers too."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class BrokerProcess:
    broker_id: int
    port: int
    data_dir: Path
    log_path: Path
    process: asyncio.subprocess.Process | None = None
    state: str = "starting"
    restarts: int = 0
    last_exit: int | None = None
    started_at: float = 0.0
    backoff_ms: int = 0
    supervisor: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def name(self) -> str:
        return f"broker-{self.broker_id}"

    def status(self) -> dict[str, Any]:
        return {
            "id": self.broker_id,
            "name": self.name,
            "host": HOST,
            "port": self.port,
            "pid": self.process.pid if self.process and self.process.returncode is None else None,
            "state": self.state,
            "restarts": self.restarts,
            "last_exit": self.last_exit,
            "data_dir": str(self.data_dir),
            "log": str(self.log_path),
        }


class Supervisor:
    def __init__(self, data_dir: Path, config: RlogConfig, config_path: Path | None) -> None:
        self.data_dir = data_dir
        self.config = config
        self.config_path = config_path
        self.stopping = False
        self.started_at_ms = time.time_ns() // 1_000_000
        cluster = config.cluster
        self.brokers = [
            BrokerProcess(
                broker_id=i,
                port=cluster.base_port + i - 1,
                data_dir=data_dir / f"broker-{i}",
                log_path=data_dir / "logs" / f"broker-{i}.log",
            )
            for i in range(1, cluster.brokers + 1)
        ]

    # -- status file ----------------------------------------------------------------------
    def write_status(self) -> None:
        document = {
            "pid": os.getpid(),
            "started_at_ms": self.started_at_ms,
            "config": str(self.config_path) if self.config_path else None,
            "brokers": [b.status() for b in self.brokers],
        }
        _write_json_atomically(self.data_dir / STATUS_FILE, document)

    # -- one broker -------------------------------------------------------------------------
    async def _spawn(self, broker: BrokerProcess) -> None:
        broker.data_dir.mkdir(parents=True, exist_ok=True)
        broker.log_path.parent.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "rlog.daemon.broker",
            "--id",
            str(broker.broker_id),
            "--host",
            HOST,
            "--port",
            str(broker.port),
            "--data-dir",
            str(broker.data_dir),
        ]
        if self.config_path is not None:
            command += ["--config", str(self.config_path)]
        with open(broker.log_path, "ab") as output:
            broker.process = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=output,
                stderr=output,
                preexec_fn=_die_with_parent,
            )
        broker.state = "starting"
        broker.started_at = time.monotonic()
        log.info("%s started, pid %d, port %d", broker.name, broker.process.pid, broker.port)
        self.write_status()

    async def _await_listening(self, broker: BrokerProcess) -> None:
        """Mark the broker running once its port accepts connections."""
        assert broker.process is not None
        while broker.process.returncode is None:
            try:
                _, writer = await asyncio.wait_for(asyncio.open_connection(HOST, broker.port), 1)
            except (OSError, TimeoutError):
                await asyncio.sleep(0.05)
                continue
            writer.close()
            broker.state = "running"
            self.write_status()
            return

    async def supervise(self, broker: BrokerProcess) -> None:
        policy = self.config.cluster.restart_policy
        while not self.stopping:
            await self._spawn(broker)
            assert broker.process is not None
            listening = asyncio.create_task(self._await_listening(broker))
            code = await broker.process.wait()
            listening.cancel()
            broker.last_exit = code
            if self.stopping:
                break
            ran_s = time.monotonic() - broker.started_at
            log.warning("%s exited with %s after %.1f s", broker.name, _describe_exit(code), ran_s)
            restart = policy == "always" or (
                policy == "on-failure" and code != ExitCode.OK and code != ExitCode.CONFIG
            )
            if not restart:
                broker.state = "stopped" if code in (ExitCode.OK, ExitCode.CONFIG) else "failed"
                if code == ExitCode.CONFIG:
                    log.error(
                        "%s cannot start (see %s); not restarting", broker.name, broker.log_path
                    )
                self.write_status()
                return
            if ran_s >= HEALTHY_RUN_S:
                broker.backoff_ms = 0
            broker.state = "restarting"
            broker.restarts += 1
            self.write_status()
            await asyncio.sleep(broker.backoff_ms / 1000)
            broker.backoff_ms = min(
                max(self.config.cluster.restart_backoff_ms, broker.backoff_ms * 2),
                self.config.cluster.restart_backoff_max_ms,
            )
        broker.state = "stopped"

    # -- whole cluster ------------------------------------------------------------------------
    async def run(self) -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        for broker in self.brokers:
            broker.supervisor = asyncio.create_task(self.supervise(broker))
        stop_requested = asyncio.create_task(stop.wait())
        # Run until asked to stop, or until no broker is left to supervise (policy gave up).
        running = {b.supervisor for b in self.brokers if b.supervisor}
        while running and not stop.is_set():
            done, _ = await asyncio.wait(
                running | {stop_requested}, return_when=asyncio.FIRST_COMPLETED
            )
            running -= done
        await self.shutdown()
        stop_requested.cancel()
        failed = any(b.state == "failed" or b.last_exit == ExitCode.CONFIG for b in self.brokers)
        return ExitCode.FAILURE if failed and not stop.is_set() else ExitCode.OK

    async def shutdown(self) -> None:
        self.stopping = True
        live = [b for b in self.brokers if b.process and b.process.returncode is None]
        for broker in live:
            assert broker.process is not None
            log.info("stopping %s (pid %d)", broker.name, broker.process.pid)
            broker.state = "stopping"
            with contextlib.suppress(ProcessLookupError):
                broker.process.terminate()
        self.write_status()
        timeout_s = self.config.cluster.shutdown_timeout_ms / 1000
        for broker in live:
            assert broker.process is not None
            try:
                await asyncio.wait_for(broker.process.wait(), timeout_s)
            except TimeoutError:
                log.error("%s did not stop within %.0f s; killing it", broker.name, timeout_s)
                with contextlib.suppress(ProcessLookupError):
                    broker.process.kill()
                await broker.process.wait()
            broker.state = "stopped"
        for broker in self.brokers:
            if broker.supervisor:
                broker.supervisor.cancel()
        await asyncio.gather(
            *(b.supervisor for b in self.brokers if b.supervisor), return_exceptions=True
        )


def _describe_exit(code: int) -> str:
    if code < 0:
        with contextlib.suppress(ValueError):
            return f"signal {signal.Signals(-code).name}"
    return f"code {code}"


def _write_json_atomically(path: Path, document: dict[str, Any]) -> None:
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(json.dumps(document, indent=1) + "\n")
    os.replace(temporary, path)


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="rlogd", description="Run a local rlog cluster in the foreground."
    )
    parser.add_argument("--brokers", type=int, default=None, help="number of brokers (default 1)")
    parser.add_argument(
        "--data-dir", type=Path, required=True, help="where the cluster keeps its data"
    )
    parser.add_argument(
        "--base-port",
        type=int,
        default=None,
        help="broker-i listens on BASE_PORT+i-1 (default 9092)",
    )
    parser.add_argument("--config", type=Path, default=None, help="rlog TOML config file")
    return parser.parse_args(argv)


def _settings(args: argparse.Namespace) -> RlogConfig:
    config = load_config(args.config)
    overrides: dict[str, Any] = {}
    if args.brokers is not None:
        overrides["brokers"] = args.brokers
    if args.base_port is not None:
        overrides["base_port"] = args.base_port
    if overrides:
        from dataclasses import replace

        cluster = replace(config.cluster, **overrides)
        if not 1 <= cluster.brokers <= 64:
            raise ConfigError(f"--brokers: {cluster.brokers} is not within 1..64")
        if not 1 <= cluster.base_port <= 65535 - cluster.brokers:
            raise ConfigError(f"--base-port: {cluster.base_port} is not a usable port")
        config = replace(config, cluster=cluster)
    return config


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s rlogd %(levelname)s: %(message)s")
    try:
        config = _settings(args)
    except ConfigError as error:
        print(f"rlogd: {error}", file=sys.stderr)
        sys.exit(ExitCode.CONFIG)
    data_dir: Path = args.data_dir.resolve()
    config_path = args.config.resolve() if args.config else None
    data_dir.mkdir(parents=True, exist_ok=True)
    # Held for rlogd's whole life; the kernel drops the lock when the process ends.
    lock = open(data_dir / LOCK_FILE, "w")  # noqa: SIM115
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print(f"rlogd: another rlogd is already running for {data_dir}", file=sys.stderr)
        sys.exit(ExitCode.USAGE)
    _write_json_atomically(
        data_dir / LAUNCH_FILE,
        {
            "brokers": config.cluster.brokers,
            "base_port": config.cluster.base_port,
            "config": str(config_path) if config_path else None,
        },
    )
    supervisor = Supervisor(data_dir, config, config_path)
    try:
        code = asyncio.run(supervisor.run())
    finally:
        with contextlib.suppress(FileNotFoundError):
            (data_dir / STATUS_FILE).unlink()
    log.info("rlogd stopped")
    sys.exit(code)


if __name__ == "__main__":
    main()
