"""The processes a config describes: the controller and broker-1..N, each with its port, its
directory, its log and the command line that starts it. One rlogd may run only some of them
(`--nodes`), the others running on other hosts."""

from __future__ import annotations

import sys
from pathlib import Path

from rlog.daemon.config import RlogConfig
from rlog.daemon.data_dir import (
    CONTROLLER,
    broker_dir,
    broker_name,
    controller_dir,
    faults_path,
    journal_path,
    process_log_path,
)
from rlog.daemon.listeners import (
    WILDCARD_HOSTS,
    Listener,
    broker_listeners,
    controller_listener,
)
from rlog.daemon.rlogd.process import HOST, SupervisedProcess

CONTROLLER_MODULE = "rlog.daemon.controller"
BROKER_MODULE = "rlog.daemon.broker"


def node_names(config: RlogConfig) -> list[str]:
    """Every process of the cluster, as --nodes and the control socket name them."""
    return [CONTROLLER, *(broker_name(i) for i in range(1, config.cluster.brokers + 1))]


def controller_endpoint(config: RlogConfig) -> Listener:
    """The controller's listener: where it binds, and the advertised host and port brokers
    (and rlogd) reach it at."""
    return controller_listener(
        config.broker.listener_settings, HOST, config.cluster.resolved_controller_port
    )


def local_listeners(config: RlogConfig, nodes: frozenset[str]) -> dict[str, list[Listener]]:
    """Each of `nodes`' listeners, by process name: what this host must be able to bind."""
    found = {CONTROLLER: [controller_endpoint(config)]} if CONTROLLER in nodes else {}
    cluster = config.cluster
    for broker_id in range(1, cluster.brokers + 1):
        if broker_name(broker_id) in nodes:
            port = cluster.base_port + broker_id - 1
            settings = config.broker.listener_settings
            found[broker_name(broker_id)] = broker_listeners(settings, broker_id, HOST, port)
    return found


def controller_process(
    data_dir: Path, config: RlogConfig, config_path: Path | None, cluster_id: str
) -> SupervisedProcess:
    listener = controller_endpoint(config)
    directory = controller_dir(data_dir)
    return SupervisedProcess(
        name=CONTROLLER,
        role="controller",
        node_id=None,
        port=listener.bind_port,
        host=_reachable(listener.bind_host),
        tls=listener.security_protocol == "SSL",
        data_dir=directory,
        log_path=process_log_path(data_dir, CONTROLLER),
        argv=_controller_argv(
            listener, directory, cluster_id, config_path, journal_path(data_dir, CONTROLLER)
        ),
    )


def broker_processes(
    data_dir: Path,
    config: RlogConfig,
    config_path: Path | None,
    cluster_id: str,
    nodes: frozenset[str] | None = None,
) -> list[SupervisedProcess]:
    """broker-i listens on base_port+i-1 (or its `listeners`) and keeps its logs in
    DIR/broker-i; only those `nodes` names (every one if None). rlogd and the CLI reach each on
    its inter-broker listener, as its peers do."""
    cluster = config.cluster
    controller = controller_endpoint(config)
    brokers = []
    for broker_id in range(1, cluster.brokers + 1):
        name = broker_name(broker_id)
        if nodes is not None and name not in nodes:
            continue
        port = cluster.base_port + broker_id - 1
        listeners = broker_listeners(config.broker.listener_settings, broker_id, HOST, port)
        own = listeners[0]
        directory = broker_dir(data_dir, broker_id)
        argv = _broker_argv(
            broker_id,
            port,
            directory,
            f"{controller.host}:{controller.port}",
            cluster_id,
            config_path,
            journal_path(data_dir, name),
            controller_beside=nodes is None or CONTROLLER in nodes,
        )
        brokers.append(
            SupervisedProcess(
                name=name,
                role="broker",
                node_id=broker_id,
                port=own.bind_port,
                host=_reachable(own.bind_host),
                tls=own.uses_tls,
                listeners=[each.endpoint for each in listeners],
                data_dir=directory,
                log_path=process_log_path(data_dir, name),
                argv=argv,
            )
        )
    return brokers


def _reachable(bind_host: str) -> str:
    """Where rlogd reaches a listener bound at `bind_host`: loopback for a wildcard."""
    return HOST if bind_host in WILDCARD_HOSTS else bind_host


def _controller_argv(
    listener: Listener, data_dir: Path, cluster_id: str, config: Path | None, events: Path
) -> list[str]:
    argv = [sys.executable, "-m", CONTROLLER_MODULE, "--host", listener.bind_host]
    argv += ["--port", str(listener.bind_port)]
    argv += ["--data-dir", str(data_dir), "--cluster-id", cluster_id, "--events", str(events)]
    argv += ["--rlogd-notices"]  # rlogd tells it of broker exits on its stdin
    return argv + (["--config", str(config)] if config is not None else [])


def _broker_argv(
    broker_id: int,
    port: int,
    data_dir: Path,
    controller: str,
    cluster_id: str,
    config: Path | None,
    events: Path,
    *,
    controller_beside: bool,
) -> list[str]:
    argv = [sys.executable, "-m", BROKER_MODULE, "--id", str(broker_id)]
    argv += ["--host", HOST, "--port", str(port), "--data-dir", str(data_dir)]
    argv += ["--controller", controller, "--cluster-id", cluster_id]
    argv += ["--events", str(events), "--faults", str(faults_path(data_dir))]
    if controller_beside:  # this rlogd starts it at the same time as the brokers
        argv += ["--controller-starting"]
    return argv + (["--config", str(config)] if config is not None else [])
