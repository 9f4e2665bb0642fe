"""Start the controller: replay the metadata log, listen, tick, stop cleanly on SIGTERM.

    python -m rlog.daemon.controller --port P --data-dir DIR --cluster-id ID
                                     [--host 127.0.0.1] [--config FILE] [--events FILE]

With --rlogd-notices (rlogd passes it) the controller reads rlogd's notices on stdin: a broker
whose process exited is fenced at once (see notices.py).

With --events (rlogd passes DATA_DIR/events/controller.jsonl) each committed metadata record's
events (broker fenced, leader elected, ISR shrunk, ...) are appended there; see
rlog.daemon.events.

Exit codes (daemon/exit_codes.py): 0 after SIGTERM/SIGINT; 78 (CONFIG) for a bad config, a port
in use, or a data dir or metadata log a restart cannot fix, with one line on stderr; 1 when the
metadata log cannot be written (rlogd restarts the controller, which replays what is durable).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import time
from pathlib import Path

import uvloop

from rlog.core.controller import Controller, ControllerConfig
from rlog.core.metadata.log_store import METADATA_PARTITION_DIR, metadata_log_config, replay
from rlog.core.metadata.records import MetadataDecodeError
from rlog.core.protocol.apis import CONTROLLER_SUPPORTED
from rlog.core.records import CorruptRecordError
from rlog.core.security.principal_mapping import PrincipalMapper
from rlog.core.storage.files import RealFileSystem
from rlog.core.storage.log import Log
from rlog.daemon.broker.authorization import (
    Authorization,
    check_own_certificate,
    keystore_principal,
)
from rlog.daemon.broker.server import BrokerServer
from rlog.daemon.config import BrokerSettings, ConfigError, load_config
from rlog.daemon.controller.handlers import Handlers
from rlog.daemon.controller.notices import read_notices
from rlog.daemon.controller.service import TICK_INTERVAL_MS, ControllerService
from rlog.daemon.data_dir import meta_path
from rlog.daemon.events import EventJournal
from rlog.daemon.exit_codes import ExitCode
from rlog.daemon.listeners import controller_listener_names, controller_protocol
from rlog.daemon.tls import server_context

log = logging.getLogger("rlog.controller")


def controller_config(settings: BrokerSettings) -> ControllerConfig:
    return ControllerConfig(
        broker_session_timeout_ms=settings.broker_session_timeout_ms,
        default_replication_factor=settings.default_replication_factor,
        num_partitions=settings.num_partitions,
        min_insync_replicas_default=settings.min_insync_replicas,
        unclean_leader_election_default=settings.unclean_leader_election_enable,
        auto_leader_rebalance_enable=settings.auto_leader_rebalance_enable,
        leader_imbalance_check_interval_ms=settings.leader_imbalance_check_interval_seconds * 1000,
    )


def check_meta_properties(data_dir: Path, cluster_id: str) -> None:
    """Kafka's meta.properties: the data dir belongs to one cluster; another's is refused, so a
    controller never serves one cluster's metadata to another's brokers."""
    path = meta_path(data_dir)
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("cluster.id=") and line.split("=", 1)[1] != cluster_id:
                raise ConfigError(
                    f"{data_dir} belongs to cluster {line.split('=', 1)[1]}, not {cluster_id}"
                )
        return
    path.write_text(f"version=1\nprocess.roles=controller\ncluster.id={cluster_id}\n")


def open_metadata_log(data_dir: Path) -> Log:
    """The metadata log, every batch re-checked (recovery point 0): a torn tail is cut."""
    return Log(
        str(data_dir / METADATA_PARTITION_DIR),
        metadata_log_config(),
        RealFileSystem(),
        recovery_point=0,
        log_start_offset=0,
        now_ms=int(time.time() * 1000),
    )


def load_controller(data_dir: Path, config: ControllerConfig) -> tuple[Controller, Log]:
    """The controller resumed from its metadata log; ConfigError if the log cannot be used."""
    try:
        metadata_log = open_metadata_log(data_dir)
    except OSError as error:
        raise ConfigError(f"cannot open the metadata log in {data_dir}: {error}") from None
    try:
        image = replay(metadata_log)
        controller = Controller(config, image, metadata_log.log_end_offset)
    except (MetadataDecodeError, CorruptRecordError, AssertionError) as error:
        metadata_log.close()
        raise ConfigError(f"the metadata log in {data_dir} is unreadable: {error}") from None
    return controller, metadata_log


def log_recovery(controller: Controller, metadata_log: Log) -> None:
    """Said once listening, so a port in use leaves stderr with its one line."""
    summary = metadata_log.recovery_summary
    if summary.truncated_bytes or summary.deleted_segments:
        log.warning(
            "metadata log recovery cut %d bytes and %d segments of a torn or corrupt tail",
            summary.truncated_bytes,
            summary.deleted_segments,
        )
    image = controller.image
    log.info(
        "metadata log replayed: %d records, %d brokers, %d topics; next offset %d",
        metadata_log.log_end_offset - metadata_log.log_start_offset,
        len(image.brokers),
        len(image.topics),
        metadata_log.log_end_offset,
    )


async def _tick_forever(service: ControllerService) -> None:
    while True:
        await asyncio.sleep(TICK_INTERVAL_MS / 1000)
        service.tick()


def controller_authorization(
    settings: BrokerSettings,
    controller: Controller,
    journal: EventJournal | None,
    protocol: str,
    mapper: PrincipalMapper,
) -> Authorization | None:
    """With authorization on and an SSL controller listener, only the brokers' own certificate
    (and super users) may use the controller: every other principal is checked as on a broker,
    and refused what it has no ACL for (the controller's own APIs have none). A PLAINTEXT
    controller listener is trusted, as the PLAINTEXT inter-broker one is: it is rlog's own."""
    if not settings.authorization_enabled:
        return None
    if protocol != "SSL":
        log.warning(
            "authorization on, but the controller's listener is PLAINTEXT: every connection to "
            "it is trusted as rlog's own (bind it to 127.0.0.1 or make it SSL)"
        )
        return None
    own_principal = keystore_principal(settings.ssl_keystore_location, mapper)
    return Authorization(settings, lambda: controller.image, journal, own_principal=own_principal)


async def run(args: argparse.Namespace, settings: BrokerSettings) -> int:
    data_dir: Path = args.data_dir
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        check_meta_properties(data_dir, args.cluster_id)
        controller, metadata_log = load_controller(data_dir, controller_config(settings))
    except (ConfigError, OSError) as error:
        print(f"controller: {error}", file=sys.stderr)
        return ExitCode.CONFIG
    listener = settings.listener_settings
    protocol = controller_protocol(listener)
    try:
        tls = server_context(settings) if protocol == "SSL" else None
    except ValueError as error:  # a TLS setting or its file
        print(f"controller: {error}", file=sys.stderr)
        metadata_log.close()
        return ExitCode.CONFIG
    journal = EventJournal(args.events, "controller") if args.events is not None else None
    service = ControllerService(controller, metadata_log, journal)
    principal_mapper = PrincipalMapper(settings.ssl_principal_mapping_rules)
    try:
        check_own_certificate(settings, principal_mapper)
        authorization = controller_authorization(
            settings, controller, journal, protocol, principal_mapper
        )
    except (OSError, ValueError) as error:  # the keystore's certificate cannot be read
        print(f"controller: {error}", file=sys.stderr)
        metadata_log.close()
        return ExitCode.CONFIG
    server = BrokerServer(
        Handlers(args.cluster_id, service),
        settings.socket_request_max_bytes,
        supported=CONTROLLER_SUPPORTED,
        listener_name=controller_listener_names(listener)[0],
        tls=tls,
        authorization=authorization,
        principal_mapper=principal_mapper,
    )
    try:
        server.listen(args.host, args.port)
    except OSError as error:
        print(
            f"controller: cannot listen on {args.host}:{args.port}: {error.strerror}",
            file=sys.stderr,
        )
        metadata_log.close()
        return ExitCode.CONFIG
    log_recovery(controller, metadata_log)
    log.info(
        "controller of cluster %s listening on %s:%d (%s)",
        args.cluster_id,
        args.host,
        args.port,
        protocol,
    )

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    duties = [
        asyncio.create_task(server.serve()),
        asyncio.create_task(_tick_forever(service)),
        asyncio.create_task(stop.wait()),
        asyncio.create_task(service.failed.wait()),
    ]
    if args.rlogd_notices:  # not a duty: the end of stdin must not stop the controller
        notices = asyncio.create_task(read_notices(service))
    done, _ = await asyncio.wait(duties, return_when=asyncio.FIRST_COMPLETED)
    for duty in duties:
        duty.cancel()
    if args.rlogd_notices:
        notices.cancel()
    await server.close()
    metadata_log.close()
    if journal is not None:
        journal.close()
    if service.failed.is_set():
        log.critical("controller stopped after a failure")
        return ExitCode.FAILURE
    for duty in done:
        if not duty.cancelled() and duty.exception() is not None:
            log.critical("controller stopped: %r", duty.exception())
            return ExitCode.FAILURE
    log.info("controller stopped cleanly")
    return ExitCode.OK


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="rlog-controller", description="The rlog controller process (metadata log)."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument(
        "--data-dir", type=Path, required=True, help="holds the metadata log (__cluster_metadata-0)"
    )
    parser.add_argument(
        "--cluster-id", required=True, help="the cluster's id (rlogd makes it once per data dir)"
    )
    parser.add_argument("--config", type=Path, default=None, help="rlog TOML config file")
    parser.add_argument(
        "--events",
        type=Path,
        default=None,
        help="append metadata events to this JSON-lines journal (rlogd passes it)",
    )
    parser.add_argument(
        "--rlogd-notices",
        action="store_true",
        help="read rlogd's notices (a broker's process exited) on stdin (rlogd passes it)",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s controller %(levelname)s %(name)s: %(message)s"
    )
    try:
        settings = load_config(args.config).broker
        controller_config(settings)
    except (ConfigError, ValueError) as error:
        print(f"controller: {error}", file=sys.stderr)
        sys.exit(ExitCode.CONFIG)
    sys.exit(uvloop.run(run(args, settings)))
