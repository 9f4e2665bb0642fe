"""Start one broker: read its config, recover its logs, listen, run the background duties."""

from __future__ import annotations

import argparse
import asyncio
import base64
import logging
import signal
import sys
import time
import uuid
from pathlib import Path

import uvloop

from rlog.daemon.broker.handlers import Handlers, now_ms
from rlog.daemon.broker.producer_ids import ProducerIdAllocator
from rlog.daemon.broker.replica_manager import ReplicaManager
from rlog.daemon.broker.server import BrokerServer
from rlog.daemon.config import BrokerSettings, ConfigError, load_config
from rlog.daemon.exit_codes import ExitCode

log = logging.getLogger("rlog.broker")


def cluster_id(data_dir: Path, broker_id: int) -> str:
    """Kafka's meta.properties: the cluster id this data dir belongs to, made once."""
    path = data_dir / "meta.properties"
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("cluster.id="):
                return line.split("=", 1)[1]
    identifier = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
    path.write_text(f"version=1\nnode.id={broker_id}\ncluster.id={identifier}\n")
    return identifier


async def _every(interval_ms: int, duty: str, action: object) -> None:
    assert callable(action)
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            action()
        except OSError as error:
            log.error("%s failed: %s", duty, error)


async def run(args: argparse.Namespace, settings: BrokerSettings) -> int:
    data_dir: Path = args.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    replicas = ReplicaManager(data_dir, settings, now_ms())
    handlers = Handlers(
        args.id,
        args.host,
        args.port,
        cluster_id(data_dir, args.id),
        replicas,
        ProducerIdAllocator(data_dir, args.id),
    )
    server = BrokerServer(handlers, settings.socket_request_max_bytes)
    try:
        server.listen(args.host, args.port)
    except OSError as error:
        print(
            f"broker-{args.id}: cannot listen on {args.host}:{args.port}: {error.strerror}",
            file=sys.stderr,
        )
        replicas.close()
        return ExitCode.CONFIG
    log.info(
        "broker %d listening on %s:%d with %d partitions (recovered in %.0f ms)",
        args.id,
        args.host,
        args.port,
        len(replicas.partitions),
        (time.monotonic() - started) * 1000,
    )

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    logs = replicas.logs
    duties = [
        asyncio.create_task(server.serve()),
        asyncio.create_task(
            _every(
                settings.log_flush_scheduler_interval_ms,
                "flush",
                lambda: logs.flush_due_logs(now_ms()),
            )
        ),
        asyncio.create_task(
            _every(
                settings.log_retention_check_interval_ms,
                "retention",
                lambda: logs.run_retention(now_ms()),
            )
        ),
        asyncio.create_task(
            _every(settings.log_flush_offset_checkpoint_interval_ms, "checkpoint", logs.checkpoint)
        ),
    ]
    await stop.wait()
    log.info("broker %d shutting down", args.id)
    for duty in duties:
        duty.cancel()
    await server.close()
    replicas.close()
    log.info("broker %d stopped cleanly", args.id)
    return ExitCode.OK


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="rlog-broker", description="One rlog broker process.")
    parser.add_argument("--id", type=int, required=True, help="broker id (node.id)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data-dir", type=Path, required=True, help="this broker's log dir")
    parser.add_argument("--config", type=Path, default=None, help="rlog TOML config file")
    parser.add_argument(
        "--controller", default=None, help="the controller's HOST:PORT (rlogd passes it)"
    )
    parser.add_argument(
        "--cluster-id", default=None, help="the cluster's id (rlogd makes it once per data dir)"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO,
        format=f"%(asctime)s broker-{args.id} %(levelname)s %(name)s: %(message)s",
    )
    try:
        settings = load_config(args.config).broker
    except ConfigError as error:
        print(f"broker-{args.id}: {error}", file=sys.stderr)
        sys.exit(ExitCode.CONFIG)
    sys.exit(uvloop.run(run(args, settings)))
