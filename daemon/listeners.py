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

SASL_PLAINTEXT and SASL_SSL listeners authenticate clients (daemon/broker/server.py with
core/security/sasl.py); rlog's own processes do not speak SASL yet, so the inter-broker and the
controller's listeners must be PLAINTEXT or SSL.
"""

from __future__ import annotations

from dataclasses import dataclass

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
class ListenerSettings:
    """The five listener keys as written (empty: not set)."""

    listeners: str = ""
    advertised_listeners: str = ""
    security_protocol_map: str = DEFAULT_PROTOCOL_MAP_TEXT
    inter_broker_listener_name: str = ""
    controller_listener_names: str = "CONTROLLER"


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
    wildcard bind."""
    mapping = protocol_map(settings)
    if not settings.listeners.strip():
        if settings.advertised_listeners.strip():
            raise ListenerError("advertised.listeners is set but listeners is not")
        name = settings.inter_broker_listener_name or "PLAINTEXT"
        protocol = _own(name, _protocol(mapping, name), "the inter-broker listener")
        return [Listener(name, protocol, host, port, host, port)]
    shift = broker_id - 1
    bound = parse_uris(settings.listeners, "listeners")
    advertised = {
        name: (adv_host, adv_port)
        for name, adv_host, adv_port in parse_uris(
            settings.advertised_listeners, "advertised.listeners"
        )
    }
    names = [name for name, _, _ in bound]
    unknown = sorted(set(advertised) - set(names))
    if unknown:
        raise ListenerError(f"advertised.listeners names {unknown}, which listeners does not")
    controller_names = controller_listener_names(settings)
    clash = sorted(set(names) & set(controller_names))
    if clash:
        raise ListenerError(
            f"listeners {clash} are the controller's (controller.listener.names): "
            "the controller binds its own port"
        )
    inter_broker = settings.inter_broker_listener_name or names[0]
    if inter_broker not in names:
        raise ListenerError(
            f"inter.broker.listener.name {inter_broker} is not one of the listeners {names}"
        )
    result = []
    for name, bind_host, bind_port in bound:
        adv_host, adv_port = advertised.get(name, (bind_host, bind_port))
        if adv_host in WILDCARD_HOSTS:
            adv_host = host
        listener = Listener(
            name,
            _protocol(mapping, name),
            bind_host,
            _shifted(bind_port, shift, "listeners"),
            adv_host,
            _shifted(adv_port, shift, "advertised.listeners"),
        )
        result.append(listener)
    result.sort(key=lambda listener: listener.name != inter_broker)  # stable: the rest in order
    _own(inter_broker, result[0].security_protocol, "the inter-broker listener")
    return result


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


def check_cluster_ports(
    settings: ListenerSettings, brokers: int, host: str, base_port: int, controller_port: int
) -> None:
    """Refuse a cluster whose brokers' (or controller's) bound ports collide."""
    taken: dict[int, str] = {controller_port: "the controller"}
    for broker_id in range(1, brokers + 1):
        for listener in broker_listeners(settings, broker_id, host, base_port + broker_id - 1):
            owner = f"broker {broker_id}'s {listener.name}"
            other = taken.get(listener.bind_port)
            if other is not None:
                raise ListenerError(
                    f"port {listener.bind_port} is both {other} and {owner}: each broker adds "
                    "its id - 1 to the ports in listeners, so leave room between listeners"
                )
            taken[listener.bind_port] = owner
