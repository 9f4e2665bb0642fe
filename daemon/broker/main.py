"""Start one broker: read its config, recover its logs, listen, run the background duties."""

from __future__ import annotations

import argparse
import asyncio
import gc
import hashlib
import logging
import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import uvloop

from rlog.core.broker import BrokerConfig, BrokerCore, MetadataChanged
from rlog.core.metadata.image import MetadataImage
from rlog.core.security.plain import scram_password_check
from rlog.core.security.principal_mapping import PrincipalMapper
from rlog.core.security.sasl import SaslConfig, SaslSession, standard_mechanisms
from rlog.core.security.scram import ScramCredential, ScramMechanism
from rlog.daemon.broker.authorization import broker_authorization, check_own_certificate
from rlog.daemon.broker.controller_link import ControllerLink
from rlog.daemon.broker.core_driver import BrokerDriver, now_ms
from rlog.daemon.broker.faults import Faults
from rlog.daemon.broker.groups import GroupService, group_config, new_member_id, txn_config
from rlog.daemon.broker.handlers import Handlers
from rlog.daemon.broker.log_cleaner import LogCleaner, clean_limit
from rlog.daemon.broker.log_dir import LogDirRecovery
from rlog.daemon.broker.peer_links import PeerLinks
from rlog.daemon.broker.server import BrokerServer
from rlog.daemon.broker.traffic import write_traffic
from rlog.daemon.config import BrokerSettings, ConfigError, load_config
from rlog.daemon.data_dir import CONTROLLER, meta_path
from rlog.daemon.events import EventJournal
from rlog.daemon.exit_codes import LOG_DIR_RECOVERED, ExitCode
from rlog.daemon.listeners import broker_listeners, controller_protocol
from rlog.daemon.tls import client_context, server_context

log = logging.getLogger("rlog.broker")

# The broker core's clock: produce and fetch deadlines, lagging followers, the flush policy.
TICK_INTERVAL_MS = 50
TRAFFIC_INTERVAL_MS = 1_000  # how often traffic.json is rewritten for rlog tui
CONTROLLED_SHUTDOWN_TIMEOUT_S = 5.0
# Collections of the youngest generation every this many allocations (Python's default is 700):
# each request allocates a few dozen dicts and records, and with the default a small-request load
# spends about 6% of the broker's time in the collector, mostly finding nothing to free.
GC_YOUNG_THRESHOLD = 20_000


def broker_config(broker_id: int, settings: BrokerSettings) -> BrokerConfig:
    """The broker core's settings from the [broker] table of rlog's config."""
    return BrokerConfig(
        broker_id=broker_id,
        log_config=settings.log_config(),
        min_insync_replicas=settings.min_insync_replicas,
        unclean_leader_election_enable=settings.unclean_leader_election_enable,
        replica_lag_time_max_ms=settings.replica_lag_time_max_ms,
        replica_fetch_max_bytes=settings.replica_fetch_max_bytes,
        replica_fetch_wait_max_ms=settings.replica_fetch_wait_max_ms,
        replica_fetch_backoff_ms=settings.replica_fetch_backoff_ms,
        replica_socket_timeout_ms=settings.replica_socket_timeout_ms,
        log_flush_scheduler_interval_ms=settings.log_flush_scheduler_interval_ms,
        log_flush_offset_checkpoint_interval_ms=settings.log_flush_offset_checkpoint_interval_ms,
        log_retention_check_interval_ms=settings.log_retention_check_interval_ms,
        groups=group_config(settings),
        transactions=txn_config(settings),
        producer_id_expiration_ms=settings.producer_id_expiration_ms,
        producer_id_expiration_check_interval_ms=settings.producer_id_expiration_check_interval_ms,
    )


def write_meta_properties(data_dir: Path, broker_id: int, cluster_id: str) -> None:
    """Kafka's meta.properties: which cluster and node this data dir belongs to. A data dir of
    another cluster is refused, so a broker never mixes two clusters' logs."""
    path = meta_path(data_dir)
    if path.exists():
        for line in path.read_text().splitlines():
            if line.startswith("cluster.id=") and line.split("=", 1)[1] != cluster_id:
                raise ConfigError(
                    f"{data_dir} belongs to cluster {line.split('=', 1)[1]}, not {cluster_id}"
                )
    path.write_text(f"version=1\nnode.id={broker_id}\ncluster.id={cluster_id}\n")


async def _every(interval_ms: int, duty: str, action: Callable[[], object]) -> None:
    while True:
        await asyncio.sleep(interval_ms / 1000)
        try:
            action()
        except OSError as error:
            log.error("%s failed: %s", duty, error)


def parse_address(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    if not host or not port.isdigit():
        raise ConfigError(f"--controller {text!r}: expected HOST:PORT")
    return host, int(port)


async def run(args: argparse.Namespace, settings: BrokerSettings) -> int:
    data_dir: Path = args.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    try:
        write_meta_properties(data_dir, args.id, args.cluster_id)
        controller = parse_address(args.controller)
    except ConfigError as error:
        print(f"broker-{args.id}: {error}", file=sys.stderr)
        return ExitCode.CONFIG
    try:
        listeners = broker_listeners(settings.listener_settings, args.id, args.host, args.port)
        ssl_listeners = [each for each in listeners if each.uses_tls and not each.uses_sasl]
        sasl_ssl_listeners = [each for each in listeners if each.uses_tls and each.uses_sasl]
        server_tls = server_context(settings) if ssl_listeners else None
        sasl_server_tls = server_context(settings, sasl=True) if sasl_ssl_listeners else None
        controller_ssl = controller_protocol(settings.listener_settings) == "SSL"
        # One context for the broker's own connections: to its peers and to the controller.
        own_tls = client_context(settings) if listeners[0].uses_tls or controller_ssl else None
        inter_broker_tls = own_tls if listeners[0].uses_tls else None
        controller_tls = own_tls if controller_ssl else None
    except ValueError as error:  # ListenerError, TlsSettingsError: a setting or its file
        print(f"broker-{args.id}: {error}", file=sys.stderr)
        return ExitCode.CONFIG
    faults = Faults(args.faults)
    # Before the first read: a change rlogd signals while the logs load is read once the loop
    # runs. rlogd starts brokers with SIGUSR1 blocked (its default action ends the process):
    # one sent since then is delivered now.
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, faults.reload)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGUSR1})
    faults.reload()
    core = BrokerCore(
        broker_config(args.id, settings),
        str(data_dir),
        faults.file_system,
        now_ms(),
        new_member_id=new_member_id,
    )
    journal = EventJournal(args.events, f"broker-{args.id}") if args.events is not None else None
    health = faults.file_system.health  # every write's verdict on the log dir (log_dir.py)
    driver = BrokerDriver(core, journal, health)  # replica events (truncations) go to rlog events

    def on_metadata() -> None:
        registered = link.registered_in_image
        driver.step(MetadataChanged(link.image, link.caught_up, registered))
        if registered:
            groups.on_metadata()

    link = ControllerLink(
        args.id,
        listeners[0].host,
        listeners[0].port,
        args.cluster_id,
        controller,
        settings,
        on_metadata,
        gate=faults.gate(CONTROLLER),
        previous_broker_epoch=core.previous_broker_epoch,
        recovering_log_ends=core.recovering_log_ends,
        incarnation_id=args.incarnation_id,
        listeners=[each.endpoint for each in listeners],
        controller_starting=args.controller_starting,
        tls=controller_tls,
    )
    peers = PeerLinks(args.id, lambda: link.image, faults, inter_broker_tls)
    driver.connect(link.alter_partition, peers.send, link.allocate_producer_ids)
    groups = GroupService(args.id, settings, link)
    handlers = Handlers(
        args.id,
        args.cluster_id,
        settings,
        driver,
        link,
        groups,
    )
    sasl = sasl_sessions(settings, lambda: link.image, args.cluster_id)
    principal_mapper = PrincipalMapper(settings.ssl_principal_mapping_rules)
    try:
        check_own_certificate(settings, principal_mapper)
        authorization = broker_authorization(
            settings, lambda: link.image, journal, listeners, principal_mapper
        )
    except (OSError, ValueError) as error:  # the keystore's certificate cannot be read
        print(f"broker-{args.id}: {error}", file=sys.stderr)
        return ExitCode.CONFIG
    servers = [
        BrokerServer(
            handlers,
            settings.socket_request_max_bytes,
            faults=faults,
            listener_name=each.name,
            tls=(sasl_server_tls if each.uses_sasl else server_tls) if each.uses_tls else None,
            sasl=sasl if each.uses_sasl else None,
            sasl_max_receive_bytes=settings.sasl_server_max_receive_size,
            authorization=authorization,
            # rlog's own processes cannot prove who they are on a PLAINTEXT inter-broker
            # listener: its connections are trusted (authorization.py).
            trusted=each is listeners[0] and each.security_protocol == "PLAINTEXT",
            principal_mapper=principal_mapper,
        )
        for each in listeners
    ]
    for server, each in zip(servers, listeners, strict=True):
        try:
            server.listen(each.bind_host, each.bind_port)
        except OSError as error:
            where = f"{each.bind_host}:{each.bind_port} (listener {each.name})"
            print(f"broker-{args.id}: cannot listen on {where}: {error.strerror}", file=sys.stderr)
            driver.close()
            return ExitCode.CONFIG
    log.info(
        "broker %d listening on %s with %d logs (recovered in %.0f ms); controller at %s:%d",
        args.id,
        ", ".join(
            f"{each.name}://{each.bind_host}:{each.bind_port} ({each.security_protocol})"
            for each in listeners
        ),
        len(core.hosted.logs.topic_partitions()),
        (time.monotonic() - started) * 1000,
        *controller,
    )

    # What start-up loaded (logs, indexes, producer states) lives as long as the process: moved
    # out of the collector's sight, so its full collections do not walk it again and again.
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    health.install_resume_handler()  # a pause is not a slow disk
    duties = [
        *(asyncio.create_task(server.serve()) for server in servers),
        asyncio.create_task(link.run()),
        asyncio.create_task(_every(TICK_INTERVAL_MS, "tick", driver.tick)),
        asyncio.create_task(
            _every(
                TRAFFIC_INTERVAL_MS,
                "traffic",
                lambda: write_traffic(core.traffic, data_dir, *requests_read(servers)),
            )
        ),
    ]
    # Compaction of cleanup.policy=compact logs (user topics, __consumer_offsets) on leaders.
    cleaner = LogCleaner(
        core.hosted.logs,
        faults.file_system,
        lambda key: clean_limit(core.replica(*key)),
        now_ms,
        settings.log_cleaner_backoff_ms,
    )
    cleaning = [asyncio.create_task(cleaner.run())] if settings.log_cleaner_enable else []
    duties += cleaning
    # A failed log dir: fenced, cleaner stopped, the disk probed until it works (log_dir.py).
    recovery = LogDirRecovery(driver.offline, faults.file_system, health, str(data_dir))
    duties.append(
        asyncio.create_task(recovery.run(link.ask_to_be_fenced, cleaning, cleaner.stop, stop))
    )
    await stop.wait()
    if recovery.recovered:
        log.info("broker %d stopping to recover its log dir (fenced already)", args.id)
    else:
        log.info("broker %d shutting down: asking the controller to move its leaderships", args.id)
        if not await link.controlled_shutdown(CONTROLLED_SHUTDOWN_TIMEOUT_S):
            log.warning("controlled shutdown did not finish in time; stopping anyway")
    for duty in duties:
        duty.cancel()
    await cleaner.stop()  # a segment rewrite may still run in its thread
    peers.close()
    for server in servers:
        await server.close()
    link.close()
    driver.close()
    if recovery.recovered:
        log.info("broker %d stopped; exiting for a restart that recovers its log dir", args.id)
        return LOG_DIR_RECOVERED
    log.info("broker %d stopped cleanly", args.id)
    return ExitCode.OK


def sasl_sessions(
    settings: BrokerSettings, image: Callable[[], MetadataImage], cluster_id: str
) -> Callable[[], SaslSession]:
    """What a SASL listener makes a session for each connection with: the enabled mechanisms,
    checking against the users' SCRAM credentials in the metadata image as it is at each
    authentication (PLAIN too). The unknown-user decoy salts are keyed by the cluster id, so
    every broker answers an unknown name alike."""

    def lookup(user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return image().scram_credentials.get((user, mechanism))

    config = SaslConfig(
        standard_mechanisms(
            settings.sasl_mechanisms,
            plain_check=scram_password_check(lookup),
            scram_lookup=lookup,
            random_bytes=os.urandom,
            mock_salt_key=hashlib.sha256(b"rlog scram decoy " + cluster_id.encode()).digest(),
        ),
        settings.connections_max_reauth_ms,
    )
    return lambda: SaslSession(config)


def requests_read(servers: list[BrokerServer]) -> tuple[int, dict[int, int]]:
    """Every request the listeners read, in all and per API key."""
    by_api: dict[int, int] = {}
    for server in servers:
        for api_key, count in server.requests_by_api.items():
            by_api[api_key] = by_api.get(api_key, 0) + count
    return sum(server.requests_received for server in servers), by_api


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="rlog-broker", description="One rlog broker process.")
    parser.add_argument("--id", type=int, required=True, help="broker id (node.id)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--data-dir", type=Path, required=True, help="this broker's log dir")
    parser.add_argument("--config", type=Path, default=None, help="rlog TOML config file")
    parser.add_argument(
        "--controller", required=True, help="the controller's HOST:PORT (rlogd passes it)"
    )
    parser.add_argument(
        "--controller-starting",
        action="store_true",
        help="the controller starts beside this broker (rlogd passes it): not reaching it in "
        "the first seconds is not logged as an outage",
    )
    parser.add_argument(
        "--faults",
        type=Path,
        default=None,
        help="chaos rules file (JSON) that rlogd writes; read at start and on SIGUSR1",
    )
    parser.add_argument(
        "--cluster-id", required=True, help="the cluster's id (rlogd makes it once per data dir)"
    )
    parser.add_argument(
        "--events",
        type=Path,
        default=None,
        help="append replica events to this JSON-lines journal (rlogd passes it)",
    )
    parser.add_argument(
        "--incarnation-id",
        type=uuid.UUID,
        default=None,
        help="this process's incarnation id (rlogd passes a new one at every start, so it can "
        "tell the controller which process ended); random if not given",
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
