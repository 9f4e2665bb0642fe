"""Which of the cluster's processes this rlogd runs (`--nodes`), and the checks that let part of
a cluster start on one host: the cluster id it must share with the others, and addresses this
host really has."""

from __future__ import annotations

import base64
import binascii
import errno
import socket

from rlog.daemon.config import ConfigError, RlogConfig
from rlog.daemon.data_dir import CONTROLLER
from rlog.daemon.listeners import WILDCARD_HOSTS
from rlog.daemon.rlogd.children import local_listeners, node_names


def parse_nodes(text: str | None, config: RlogConfig) -> frozenset[str] | None:
    """`--nodes controller,broker-1` as process names; None (every process) if not given.
    ConfigError naming what is not one of the cluster's processes."""
    if text is None:
        return None
    known = node_names(config)
    asked = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in asked if name not in known]
    if unknown or not asked:
        raise ConfigError(
            f"--nodes {text!r}: {', '.join(unknown) or 'names no process'}; the cluster's "
            f"processes are {', '.join(known)} ([cluster] brokers = {config.cluster.brokers})"
        )
    return frozenset(asked)


def runs_controller(nodes: frozenset[str] | None) -> bool:
    return nodes is None or CONTROLLER in nodes


def check_cluster_id(cluster_id: str) -> str:
    """`--cluster-id` if it has Kafka's form (a UUID, base64url without padding: 22
    characters, as `kafka-storage random-uuid` prints and rlogd makes); else ConfigError."""
    try:
        raw = base64.urlsafe_b64decode(cluster_id + "==")
    except (binascii.Error, ValueError):
        raw = b""
    if len(cluster_id) != 22 or len(raw) != 16 or cluster_id.startswith("-"):
        raise ConfigError(
            f"--cluster-id {cluster_id!r} is not a cluster id: 22 characters of base64url, as "
            "the controller's host has it in DATA_DIR/meta.properties (rlog cluster status "
            "shows it)"
        )
    return cluster_id


def foreign_addresses(config: RlogConfig, nodes: frozenset[str] | None) -> list[str]:
    """One line for each address a listener of this host's processes binds that this host
    does not have (or that does not resolve): the process would fail to listen there."""
    names = frozenset(node_names(config)) if nodes is None else nodes
    problems = []
    for name, listeners in local_listeners(config, names).items():
        for listener in listeners:
            host = listener.bind_host
            problem = None if host in WILDCARD_HOSTS else _bind_problem(host)
            if problem is not None:
                problems.append(
                    f"{name}'s listener {listener.name} binds {host}, {problem} (run "
                    f"{name} with --nodes on the host that has that address)"
                )
    return problems


def _bind_problem(host: str) -> str | None:
    """Why a socket cannot bind `host` here, or None if it can (on a port the kernel picks,
    so a port in use does not count against it)."""
    try:
        candidates = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)
    except socket.gaierror as error:
        return f"which does not resolve ({error.strerror})"
    for family, kind, protocol, _, address in candidates:
        with socket.socket(family, kind, protocol) as probe:
            try:
                probe.bind(address)
            except OSError as error:
                if error.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                    continue
                return None  # something else (permissions): the process will say what
            return None
    return "which is not an address of this host"
