"""Listener settings as Kafka names them, resolved per broker, and refusals that name the key."""

from __future__ import annotations

import pytest

from rlog.core.metadata.image import BrokerInfo
from rlog.core.metadata.records import Endpoint, RegisterBroker, decode_record, encode_record
from rlog.daemon.config import ConfigError, broker_settings, parse_config
from rlog.daemon.listeners import Listener, ListenerSettings, broker_listeners, controller_protocol

TWO = ListenerSettings(
    listeners="INTERNAL://127.0.0.1:9092,EXTERNAL://0.0.0.0:9192",
    advertised_listeners="EXTERNAL://kafka.example:19192",
    security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:SSL,CONTROLLER:PLAINTEXT",
    inter_broker_listener_name="INTERNAL",
)


def test_without_listeners_a_broker_has_one_at_rlogds_port() -> None:
    assert broker_listeners(ListenerSettings(), 3, "127.0.0.1", 9094) == [
        Listener("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9094, "127.0.0.1", 9094)
    ]
    # Named by inter.broker.listener.name: how `rlog cluster up --tls` makes it SSL.
    tls = ListenerSettings(
        inter_broker_listener_name="SSL", security_protocol_map="SSL:SSL,CONTROLLER:SSL"
    )
    (only,) = broker_listeners(tls, 1, "127.0.0.1", 9092)
    assert (only.name, only.security_protocol, only.uses_tls) == ("SSL", "SSL", True)
    assert controller_protocol(tls) == "SSL"


def test_broker_n_adds_n_minus_one_to_every_port_and_advertises_its_own() -> None:
    internal, external = broker_listeners(TWO, 3, "127.0.0.1", 9094)
    assert internal == Listener("INTERNAL", "PLAINTEXT", "127.0.0.1", 9094, "127.0.0.1", 9094)
    # A wildcard bind; the advertised name and port (shifted the same way).
    assert external == Listener("EXTERNAL", "SSL", "0.0.0.0", 9194, "kafka.example", 19194)


def test_the_inter_broker_listener_comes_first() -> None:
    settings = ListenerSettings(
        listeners="EXTERNAL://127.0.0.1:9192,INTERNAL://127.0.0.1:9092",
        security_protocol_map="INTERNAL:PLAINTEXT,EXTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        inter_broker_listener_name="INTERNAL",
    )
    assert [each.name for each in broker_listeners(settings, 1, "127.0.0.1", 9092)] == [
        "INTERNAL",
        "EXTERNAL",
    ]


def test_a_wildcard_bind_without_an_advertised_host_advertises_rlogds_host() -> None:
    settings = ListenerSettings(listeners="PLAINTEXT://0.0.0.0:9092")
    (only,) = broker_listeners(settings, 1, "10.0.0.7", 9092)
    assert (only.bind_host, only.host) == ("0.0.0.0", "10.0.0.7")


@pytest.mark.parametrize(
    ("keys", "says"),
    [
        ({"listeners": "PLAINTEXT//127.0.0.1:9092"}, "is not NAME://host:port"),
        ({"listeners": "PLAINTEXT://127.0.0.1:0"}, "is not 1-65535"),
        ({"listeners": "plain://127.0.0.1:9092"}, "upper case"),
        ({"listeners": "PLAINTEXT://a:1,PLAINTEXT://b:2"}, "named twice"),
        ({"listeners": "FOO://127.0.0.1:9092"}, "no protocol for listener FOO"),
        ({"listeners": "SASL_SSL://127.0.0.1:9092"}, "SASL is for clients' listeners"),
        ({"inter.broker.listener.name": "SASL_PLAINTEXT"}, "speak PLAINTEXT or SSL only"),
        ({"advertised.listeners": "PLAINTEXT://x:1"}, "listeners is not"),
        (
            {"listeners": "PLAINTEXT://a:1", "advertised.listeners": "OTHER://b:2"},
            "which listeners does not",
        ),
        (
            {"listeners": "PLAINTEXT://a:1", "inter.broker.listener.name": "SSL"},
            "is not one of the listeners",
        ),
        ({"listener.security.protocol.map": "PLAINTEXT:TLS"}, "is not NAME:PROTOCOL"),
        ({"listeners": "SSL://127.0.0.1:9092"}, "needs ssl.keystore.location"),
        ({"ssl.client.auth": "sometimes"}, "ssl.client.auth"),
        ({"ssl.keystore.type": "JKS"}, "PEM files only"),
        ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols"),
        ({"ssl.client.auth": "required"}, "set ssl.truststore.location"),
    ],
)
def test_bad_listener_and_tls_settings_are_refused_naming_the_key(
    keys: dict[str, str], says: str
) -> None:
    with pytest.raises(ConfigError, match=says):
        broker_settings(keys)


def test_brokers_listeners_may_not_share_a_port() -> None:
    text = """[cluster]
brokers = 3
[broker]
listeners = "A://127.0.0.1:9092,B://127.0.0.1:9093"
"listener.security.protocol.map" = "A:PLAINTEXT,B:PLAINTEXT,CONTROLLER:PLAINTEXT"
"""
    with pytest.raises(ConfigError, match="port 9093 is both broker 1's B and broker 2's A"):
        parse_config(text)
    parse_config(text.replace("9093", "9192"))  # room between them: accepted


def test_registrations_carry_their_listeners_and_old_ones_mean_plaintext() -> None:
    endpoints = (Endpoint("INTERNAL", "h", 1, "PLAINTEXT"), Endpoint("EXTERNAL", "x", 2, "SSL"))
    record = RegisterBroker(1, "inc", 5, "h", 1, None, endpoints)
    assert decode_record(encode_record(record)) == record
    old = (
        b'{"broker_epoch":5,"broker_id":1,"host":"h","incarnation_id":"i","port":1,'
        b'"rack":null,"type":"register_broker"}'
    )
    assert decode_record(old).listeners == ()
    broker = BrokerInfo(1, 5, "inc", "h", 1, None, False, endpoints)
    assert broker.endpoint("EXTERNAL") == endpoints[1]
    assert broker.endpoint("PLAINTEXT") is None  # left out of answers on that listener
    legacy = BrokerInfo(1, 5, "inc", "h", 1, None, False)
    assert legacy.endpoint("PLAINTEXT") == Endpoint("PLAINTEXT", "h", 1, "PLAINTEXT")


def test_authorization_needs_a_listener_that_is_not_the_trusted_one() -> None:
    """The PLAINTEXT inter-broker listener is trusted as rlog's own: with it alone, an
    authorizer would check nothing, so the config is refused rather than silently open."""
    with pytest.raises(ConfigError, match=r"authorizer\.class\.name is set, but the only listener"):
        broker_settings({"authorizer.class.name": "standard"})
    clients = broker_settings(
        {
            "authorizer.class.name": "standard",
            "listeners": "PLAINTEXT://127.0.0.1:9092,CLIENTS://127.0.0.1:9192",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENTS:PLAINTEXT,"
            "CONTROLLER:PLAINTEXT",
        }
    )
    assert clients.authorization_enabled
    # An SSL inter-broker listener proves who connects: it may be the only one.
    assert broker_settings(
        {
            "authorizer.class.name": "standard",
            "inter.broker.listener.name": "SSL",
            "listener.security.protocol.map": "SSL:SSL,CONTROLLER:SSL",
            "ssl.keystore.location": __file__,
            "ssl.truststore.location": __file__,
        }
    ).authorization_enabled
