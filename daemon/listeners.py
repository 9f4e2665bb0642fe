"""Listeners as Kafka names them: where a broker binds, what it advertises, and how each speaks.

    listeners = "INTERNAL://127.0.0.1:9092,EXTERNAL://0.0.0.0:9192"
    advertised.listeners = "INTERNAL://127.0.0.1:9092,EXTERNAL://broker.example:9192"
    listener.security.protocol.map = "INTERNAL:PLAINTEXT,EXTERNAL:SSL,CONTROLLER:PLAINTEXT"
    inter.broker.listener.name = "INTERNAL"
    controller.listener.names = "CONTROLLER"

rlog runs every broker of a cluster from one config file, so the ports written are broker 1's
and broker N binds and advertises each of them plus N - 1 (a cluster of 3 on 9092 and 9192 uses
9092-9094 and 9192-9194). Without `listeners` a broker has one listener at the host and port
rlogd gives it (the cluster's base port plus N - 1), named `inter.broker.listener.name`
(PLAINTEXT when that is not set either), so `rlog cluster up --tls` makes it SSL by naming it.

A listener advertises what `advertised.listeners` says for its name, else where it binds (a
wildcard host, "" or 0.0.0.0, is advertised as the host rlogd gives the broker). Clients get the
endpoints of the listener they connected to, so a client outside a network reaches the brokers
by its own listener's names. The controller's listener is the first of
`controller.listener.names`, bound at the controller's port; its protocol comes from the map.

Brokers on other hosts: a `[broker.N]` table gives broker N listeners of its own, and a
`[controller]` table the controller's (`listeners` and `advertised.listeners`, Kafka's names).
Their ports are taken as written, since such a node has its host to itself, and [broker]'s
`listeners` and `advertised.listeners` do not apply to it. A node there may bind a wildcard
only if it advertises another host: 127.0.0.1 would send clients on other hosts to themselves.
Brokers reach the controller at its advertised endpoint. The protocol map and the
inter-broker and controller listener names stay cluster-wide, in [broker].

SASL_PLAINTEXT and SASL_SSL listeners authenticate clients (daemon/broker/server.py with
core/security/sasl.py); rlog's own processes do not speak SASL yet, so the inter-broker and the
controller's listeners must be PLAINTEXT or SSL.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from rlog.core.metadata.records import Endpoint

# Kafka's SecurityProtocol ids, as BrokerRegistration carries them.
SECURITY_PROTOCOLS = {"PLAINTEXT": 0, "SSL": 1, "SASL_PLAINTEXT": 2, "SASL_SSL": 3}
SERVED_PROTOCOLS = tuple(SECURITY_PROTOCOLS)
# What rlog's own processes (followers, brokers to the controller, rlogd, the CLI) can speak.
OWN_PROTOCOLS = ("PLAINTEXT", "SSL")
# Kafka's default map: each protocol's name is also a listener name. While the map is the
# default, the controller's listener names are PLAINTEXT too (as in Kafka's KRaft mode).
DEFAULT_PROTOCOL_MAP_TEXT = ",".join(f"{name}:{name}" for name in SECURITY_PROTOCOLS)
WILDCARD_HOSTS = ("", "0.0.0.0", "::")


class ListenerError(ValueError):
    """A listener setting is wrong; the message names the key."""


@dataclass(frozen=True)
class NodeListeners:
    """One node's own `listeners` and `advertised.listeners` ([controller] or [broker.N]), as
    written: ports are not shifted by the broker id."""

    listeners: str
    advertised_listeners: str = ""


@dataclass(frozen=True)
class NodeListenerTables:
    """The [controller] and [broker.N] tables of a config (none: every node uses [broker]'s)."""

    controller: NodeListeners | None = None
    brokers: tuple[tuple[int, NodeListeners], ...] = ()  # (N, its table), by N

    def broker(self, broker_id: int) -> NodeListeners | None:
        return next((table for each, table in self.brokers if each == broker_id), None)


@dataclass(frozen=True)
class ListenerSettings:
    """The five listener keys as written (empty: not set), and the nodes' own tables."""

    listeners: str = ""
    advertised_listeners: str = ""
    security_protocol_map: str = DEFAULT_PROTOCOL_MAP_TEXT
    inter_broker_listener_name: str = ""
    controller_listener_names: str = "CONTROLLER"
    nodes: NodeListenerTables = NodeListenerTables()


@dataclass(frozen=True)
class Listener:
    """One listener of one broker: where it binds and what it advertises."""

    name: str
    security_protocol: str
    bind_host: str
    bind_port: int
    host: str  # advertised
    port: int

    @property
    def endpoint(self) -> Endpoint:
        return Endpoint(self.name, self.host, self.port, self.security_protocol)

    @property
    def uses_tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")


def security_protocol_name(protocol_id: int) -> str:
    for name, number in SECURITY_PROTOCOLS.items():
        if number == protocol_id:
            return name
    return "UNKNOWN"


def parse_uris(text: str, key: str) -> list[tuple[str, str, int]]:
    """`NAME://host:port,...` as (name, host, port); ListenerError naming `key` if malformed."""
    found: list[tuple[str, str, int]] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, address = item.partition("://")
        host, colon, port_text = address.rpartition(":")
        if not sep or not colon or not name or not port_text.isdigit():
            raise ListenerError(f"{key}: {item!r} is not NAME://host:port")
        port = int(port_text)
        if not 0 < port < 65536:
            raise ListenerError(f"{key}: port {port} in {item!r} is not 1-65535")
        host = host.strip("[]")  # [::1]:9092
        if name.upper() != name:
            raise ListenerError(f"{key}: listener name {name!r} must be upper case, as Kafka's")
        if any(name == seen for seen, _, _ in found):
            raise ListenerError(f"{key}: listener {name} is named twice")
        found.append((name, host, port))
    return found


def protocol_map(settings: ListenerSettings) -> dict[str, str]:
    """Listener name -> security protocol, with the controller's names while the map is the
    default."""
    mapping = parse_protocol_map(settings.security_protocol_map)
    if settings.security_protocol_map.strip() in ("", DEFAULT_PROTOCOL_MAP_TEXT):
        for name in controller_listener_names(settings):
            mapping.setdefault(name, "PLAINTEXT")
    return mapping


def parse_protocol_map(text: str) -> dict[str, str]:
    key = "listener.security.protocol.map"
    mapping: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, colon, protocol = item.partition(":")
        if not colon or not name or protocol not in SECURITY_PROTOCOLS:
            known = ", ".join(SECURITY_PROTOCOLS)
            raise ListenerError(
                f"{key}: {item!r} is not NAME:PROTOCOL with PROTOCOL one of {known}"
            )
        mapping[name] = protocol
    return mapping


def _protocol(mapping: dict[str, str], name: str) -> str:
    protocol = mapping.get(name)
    if protocol is None:
        raise ListenerError(
            f"listener.security.protocol.map has no protocol for listener {name} "
            f"(it maps {', '.join(sorted(mapping)) or 'nothing'})"
        )
    if protocol not in SERVED_PROTOCOLS:
        raise ListenerError(f"listener {name} is {protocol}, which rlog does not serve")
    return protocol


def _own(name: str, protocol: str, role: str) -> str:
    """`protocol`, if rlog's own processes can speak it on the `role` listener."""
    if protocol not in OWN_PROTOCOLS:
        raise ListenerError(
            f"listener {name} is {role} and {protocol}: rlog's own processes speak "
            f"{' or '.join(OWN_PROTOCOLS)} only (SASL is for clients' listeners)"
        )
    return protocol


def broker_listeners(
    settings: ListenerSettings, broker_id: int, host: str, port: int
) -> list[Listener]:
    """Broker `broker_id`'s listeners, the inter-broker one first. `host` and `port` are what
    rlogd gives it: its only listener when `listeners` is not set, and the advertised host of a
    wildcard bind. A [broker.N] table replaces [broker]'s listeners for broker N."""
    table = settings.nodes.broker(broker_id)
    if table is not None:
        where = f"[broker.{broker_id}] "
        return _resolved(settings, table.listeners, table.advertised_listeners, 0, None, where)
    if not settings.listeners.strip():
        if settings.advertised_listeners.strip():
            raise ListenerError("advertised.listeners is set but listeners is not")
        mapping = protocol_map(settings)
        name = settings.inter_broker_listener_name or "PLAINTEXT"
        protocol = _own(name, _protocol(mapping, name), "the inter-broker listener")
        return [Listener(name, protocol, host, port, host, port)]
    shift = broker_id - 1
    return _resolved(settings, settings.listeners, settings.advertised_listeners, shift, host, "")


def _resolved(
    settings: ListenerSettings,
    listeners: str,
    advertised_listeners: str,
    shift: int,
    wildcard_host: str | None,
    where: str,
) -> list[Listener]:
    """One broker's listeners from `listeners` and `advertised.listeners` as written in the
    table `where` names ("" for [broker], whose ports each broker shifts by `shift`). A wildcard
    bind advertises `wildcard_host`; None: it must advertise a host of its own."""
    mapping = protocol_map(settings)
    bound = parse_uris(listeners, f"{where}listeners")
    advertised = {
        name: (adv_host, adv_port)
        for name, adv_host, adv_port in parse_uris(
            advertised_listeners, f"{where}advertised.listeners"
        )
    }
    names = [name for name, _, _ in bound]
    unknown = sorted(set(advertised) - set(names))
    if unknown:
        raise ListenerError(
            f"{where}advertised.listeners names {unknown}, which listeners does not"
        )
    controller_names = controller_listener_names(settings)
    clash = sorted(set(names) & set(controller_names))
    if clash:
        raise ListenerError(
            f"{where}listeners {clash} are the controller's (controller.listener.names): "
            "the controller binds its own port"
        )
    inter_broker = settings.inter_broker_listener_name or names[0]
    if inter_broker not in names:
        raise ListenerError(
            f"inter.broker.listener.name {inter_broker} is not one of the {where}listeners {names}"
        )
    result = []
    for name, bind_host, bind_port in bound:
        adv_host, adv_port = advertised.get(name, (bind_host, bind_port))
        if adv_host in WILDCARD_HOSTS:
            if wildcard_host is None:
                raise _unreachable(f"{where.strip()} listener {name}", bind_host)
            adv_host = wildcard_host
        listener = Listener(
            name,
            _protocol(mapping, name),
            bind_host,
            _shifted(bind_port, shift, f"{where}listeners"),
            adv_host,
            _shifted(adv_port, shift, f"{where}advertised.listeners"),
        )
        result.append(listener)
    result.sort(key=lambda listener: listener.name != inter_broker)  # stable: the rest in order
    _own(inter_broker, result[0].security_protocol, "the inter-broker listener")
    return result


def _unreachable(what: str, bind_host: str) -> ListenerError:
    return ListenerError(
        f"{what} binds {bind_host or 'every address'} and advertised.listeners gives it no "
        "host: set one that clients and the other nodes reach it by"
    )


def _shifted(port: int, shift: int, key: str) -> int:
    if port + shift > 65535:
        raise ListenerError(f"{key}: port {port} + {shift} for broker {shift + 1} is past 65535")
    return port + shift


def controller_listener_names(settings: ListenerSettings) -> list[str]:
    text = settings.controller_listener_names.strip()
    return [name.strip() for name in text.split(",") if name.strip()] if text else ["CONTROLLER"]


def controller_protocol(settings: ListenerSettings) -> str:
    """The security protocol of the controller's listener."""
    name = controller_listener_names(settings)[0]
    return _own(name, _protocol(protocol_map(settings), name), "the controller's")


def controller_listener(settings: ListenerSettings, host: str, port: int) -> Listener:
    """Where the controller binds, and where brokers reach it (its advertised endpoint): its
    [controller] table, else `host`:`port` (rlogd's host and [cluster] controller_port)."""
    name = controller_listener_names(settings)[0]
    protocol = controller_protocol(settings)
    table = settings.nodes.controller
    if table is None:
        return Listener(name, protocol, host, port, host, port)
    bound = parse_uris(table.listeners, "[controller] listeners")
    advertised = parse_uris(table.advertised_listeners, "[controller] advertised.listeners")
    for key, found in (("listeners", bound), ("advertised.listeners", advertised)):
        if found and [each for each, _, _ in found] != [name]:
            raise ListenerError(
                f"[controller] {key}: the controller has one listener, {name} (the first of "
                "controller.listener.names)"
            )
    _, bind_host, bind_port = bound[0]
    _, adv_host, adv_port = advertised[0] if advertised else bound[0]
    if adv_host in WILDCARD_HOSTS:
        raise _unreachable(f"[controller] listener {name}", bind_host)
    return Listener(name, protocol, bind_host, bind_port, adv_host, adv_port)


# ---- the [controller] and [broker.N] tables ----

NODE_KEYS = ("listeners", "advertised.listeners")
_BROKER_TABLE = re.compile(r"[1-9][0-9]*")


def node_listener_tables(document: dict[str, Any]) -> tuple[dict[str, Any], NodeListenerTables]:
    """A parsed config's [broker] table without its [broker.N] tables, and the nodes' tables
    ([controller], [broker.N]); ListenerError naming the table if one is malformed."""
    broker_table: dict[str, Any] = {}
    brokers: dict[int, NodeListeners] = {}
    for key, value in document.get("broker", {}).items():
        if not isinstance(value, dict):
            broker_table[key] = value
            continue
        if not _BROKER_TABLE.fullmatch(key) or int(key) in brokers:
            raise ListenerError(
                f"[broker.{key}]: a broker's own table is [broker.N], N its id (1, 2, ...), "
                "once each"
            )
        brokers[int(key)] = _node_table(value, f"[broker.{key}]")
    controller = document.get("controller")
    return broker_table, NodeListenerTables(
        None if controller is None else _node_table(controller, "[controller]"),
        tuple(sorted(brokers.items())),
    )


def _node_table(table: Any, where: str) -> NodeListeners:
    if not isinstance(table, dict):
        raise ListenerError(f"{where} must be a table")
    for key, value in table.items():
        if key not in NODE_KEYS:
            raise ListenerError(
                f"{where} {key}: unknown key (a node's own table holds {' and '.join(NODE_KEYS)}; "
                "the rest is cluster-wide, in [broker])"
            )
        if not isinstance(value, str):
            raise ListenerError(f"{where} {key}: expected a string, got {value!r}")
    if not table.get("listeners", "").strip():
        raise ListenerError(f"{where} needs listeners (NAME://host:port,...)")
    return NodeListeners(table["listeners"], table.get("advertised.listeners", ""))


def check_cluster_ports(
    settings: ListenerSettings, brokers: int, host: str, base_port: int, controller_port: int
) -> None:
    """Refuse a cluster whose [broker.N] tables name a broker it does not have, or whose
    brokers' (or controller's) bound ports collide. Nodes without a table of their own share
    rlogd's host, so they collide on a port alone; a node with one may run on another host, so
    it collides only at the same address and port."""
    beyond = [broker_id for broker_id, _ in settings.nodes.brokers if broker_id > brokers]
    if beyond:
        raise ListenerError(
            f"[broker.{beyond[0]}]: the cluster has {brokers} broker(s) ([cluster] brokers)"
        )
    controller = controller_listener(settings, host, controller_port)
    # (owner, host, port, shares rlogd's host)
    taken = [
        (
            "the controller",
            controller.bind_host,
            controller.bind_port,
            not settings.nodes.controller,
        )
    ]
    for broker_id in range(1, brokers + 1):
        shared = settings.nodes.broker(broker_id) is None
        for listener in broker_listeners(settings, broker_id, host, base_port + broker_id - 1):
            owner = f"broker {broker_id}'s {listener.name}"
            for other, other_host, other_port, other_shared in taken:
                if other_port != listener.bind_port:
                    continue
                if shared and other_shared:
                    raise ListenerError(
                        f"port {listener.bind_port} is both {other} and {owner}: each broker "
                        "adds its id - 1 to the ports in listeners, so leave room between "
                        "listeners"
                    )
                if other_host == listener.bind_host:
                    raise ListenerError(
                        f"{listener.bind_host}:{listener.bind_port} is both {other} and {owner}"
                    )
            taken.append((owner, listener.bind_host, listener.bind_port, shared))
