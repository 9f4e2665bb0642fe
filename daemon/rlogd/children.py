"""The processes a config describes: the controller and broker-1..N, each with its port, its
directory, its log and the command line that starts it."""

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
from rlog.daemon.listeners import WILDCARD_HOSTS, broker_listeners, controller_protocol
from rlog.daemon.rlogd.process import HOST, SupervisedProcess

CONTROLLER_MODULE = "rlog.daemon.controller"
BROKER_MODULE = "rlog.daemon.broker"


def controller_process(
    data_dir: Path, config: RlogConfig, config_path: Path | None, cluster_id: str
) -> SupervisedProcess:
    port = config.cluster.resolved_controller_port
    directory = controller_dir(data_dir)
    return SupervisedProcess(
        name=CONTROLLER,
        role="controller",
        node_id=None,
        port=port,
        tls=controller_protocol(config.broker.listener_settings) == "SSL",
        data_dir=directory,
        log_path=process_log_path(data_dir, CONTROLLER),
        argv=_controller_argv(
            port, directory, cluster_id, config_path, journal_path(data_dir, CONTROLLER)
        ),
    )


def broker_processes(
    data_dir: Path, config: RlogConfig, config_path: Path | None, cluster_id: str
) -> list[SupervisedProcess]:
    """broker-i listens on base_port+i-1 (or its `listeners`) and keeps its logs in
    DIR/broker-i. rlogd and the CLI reach it on its inter-broker listener, as its peers do."""
    cluster = config.cluster
    brokers = []
    for broker_id in range(1, cluster.brokers + 1):
        name = broker_name(broker_id)
        port = cluster.base_port + broker_id - 1
        listeners = broker_listeners(config.broker.listener_settings, broker_id, HOST, port)
        own = listeners[0]
        directory = broker_dir(data_dir, broker_id)
        argv = _broker_argv(
            broker_id,
            port,
            directory,
            cluster.resolved_controller_port,
            cluster_id,
            config_path,
            journal_path(data_dir, name),
        )
        brokers.append(
            SupervisedProcess(
                name=name,
                role="broker",
                node_id=broker_id,
                port=own.bind_port,
                host=own.bind_host if own.bind_host not in WILDCARD_HOSTS else HOST,
                tls=own.uses_tls,
                listeners=[each.endpoint for each in listeners],
                data_dir=directory,
                log_path=process_log_path(data_dir, name),
                argv=argv,
            )
        )
    return brokers


def _controller_argv(
    port: int, data_dir: Path, cluster_id: str, config: Path | None, events: Path
) -> list[str]:
    argv = [sys.executable, "-m", CONTROLLER_MODULE, "--host", HOST, "--port", str(port)]
    argv += ["--data-dir", str(data_dir), "--cluster-id", cluster_id, "--events", str(events)]
    argv += ["--rlogd-notices"]  # rlogd tells it of broker exits on its stdin
    return argv + (["--config", str(config)] if config is not None else [])


def _broker_argv(
    broker_id: int,
    port: int,
    data_dir: Path,
    controller_port: int,
    cluster_id: str,
    config: Path | None,
    events: Path,
) -> list[str]:
    argv = [sys.executable, "-m", BROKER_MODULE, "--id", str(broker_id)]
    argv += ["--host", HOST, "--port", str(port), "--data-dir", str(data_dir)]
    argv += ["--controller", f"{HOST}:{controller_port}", "--cluster-id", cluster_id]
    argv += ["--events", str(events), "--faults", str(faults_path(data_dir))]
    return argv + (["--config", str(config)] if config is not None else [])
