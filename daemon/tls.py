"""TLS for SSL listeners and for rlog's own connections to them, with Python's `ssl`.

Settings are Kafka's, PEM only:

    ssl.keystore.type = "PEM"
    ssl.keystore.location = "/etc/rlog/broker.pem"   # private key and certificate chain
    ssl.key.password = ""                            # if the key is encrypted
    ssl.truststore.type = "PEM"
    ssl.truststore.location = "/etc/rlog/ca.pem"     # CAs that sign clients' and peers' certs
    ssl.client.auth = "none" | "requested" | "required"
    ssl.endpoint.identification.algorithm = "https"  # "" : peers' host names are not checked
    ssl.enabled.protocols = "TLSv1.2,TLSv1.3"

A broker's SSL listeners present the keystore's certificate; with `ssl.client.auth` they ask
clients for theirs and check it against the truststore. rlog's own clients of those listeners
(followers fetching from leaders, brokers registering with the controller, rlogd and the CLI
checking a broker) use the same files: the truststore to check the broker, the keystore as their
own certificate, so `ssl.client.auth = "required"` holds for them too.

`TlsSession` is one connection's TLS in memory (`ssl.MemoryBIO`): the listener keeps reading
and writing its socket itself and passes ciphertext through the session, so an SSL connection
is served by the same code as a plaintext one. The price: a fetch answer's log bytes are read
into memory and encrypted rather than sent with sendfile (Python's `ssl` has no kernel TLS).
"""

from __future__ import annotations

import contextlib
import ssl
from pathlib import Path
from typing import TYPE_CHECKING

from rlog.daemon.listeners import broker_listeners, controller_protocol

if TYPE_CHECKING:
    from rlog.daemon.config import BrokerSettings

CLIENT_AUTH = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
# Bytes of plaintext asked of the session per read.
_READ_BYTES = 256 * 1024


class TlsSettingsError(ValueError):
    """A TLS setting is wrong or its file cannot be used; the message names the key."""


def needs_tls(settings: BrokerSettings) -> bool:
    """Whether any listener of the cluster, the controller's too, speaks TLS."""
    listeners = settings.listener_settings
    if controller_protocol(listeners) in ("SSL", "SASL_SSL"):
        return True
    # Broker 1 stands for every broker without a [broker.N] table of its own.
    broker_ids = {1, *(broker_id for broker_id, _table in listeners.nodes.brokers)}
    return any(
        each.uses_tls
        for broker_id in broker_ids
        for each in broker_listeners(listeners, broker_id, "127.0.0.1", 1)
    )


def check_tls_settings(settings: BrokerSettings) -> None:
    """Refuse settings that cannot work, before any file is read."""
    if settings.ssl_client_auth not in CLIENT_AUTH:
        raise TlsSettingsError(
            f"ssl.client.auth: {settings.ssl_client_auth!r} is not one of {', '.join(CLIENT_AUTH)}"
        )
    for key, kind in (
        ("ssl.keystore.type", settings.ssl_keystore_type),
        ("ssl.truststore.type", settings.ssl_truststore_type),
    ):
        if kind.upper() != "PEM":
            raise TlsSettingsError(
                f"{key}: {kind!r}: rlog reads PEM files only (convert a JKS or PKCS12 store "
                "with keytool or openssl)"
            )
    _protocol_range(settings)
    if settings.ssl_endpoint_identification_algorithm not in ("https", ""):
        raise TlsSettingsError(
            "ssl.endpoint.identification.algorithm: 'https' (check host names) or '' (do not)"
        )
    if needs_tls(settings) and not settings.ssl_keystore_location:
        raise TlsSettingsError("an SSL listener needs ssl.keystore.location (its certificate)")
    if settings.ssl_client_auth != "none" and not settings.ssl_truststore_location:
        raise TlsSettingsError(
            "ssl.client.auth asks clients for certificates: set ssl.truststore.location to "
            "the CA certificates that sign them"
        )


def _protocol_range(settings: BrokerSettings) -> tuple[ssl.TLSVersion, ssl.TLSVersion]:
    names = [part.strip() for part in settings.ssl_enabled_protocols.split(",") if part.strip()]
    unknown = [name for name in names if name not in _VERSIONS]
    if not names or unknown:
        raise TlsSettingsError(
            f"ssl.enabled.protocols: {settings.ssl_enabled_protocols!r}; rlog speaks "
            f"{', '.join(_VERSIONS)}"
        )
    versions = sorted(_VERSIONS[name] for name in names)
    return versions[0], versions[-1]


def _load(context: ssl.SSLContext, settings: BrokerSettings, *, own_cert: bool) -> None:
    low, high = _protocol_range(settings)
    context.minimum_version, context.maximum_version = low, high
    try:
        if settings.ssl_truststore_location:
            context.load_verify_locations(cafile=_file(settings.ssl_truststore_location))
        if own_cert and settings.ssl_keystore_location:
            context.load_cert_chain(
                _file(settings.ssl_keystore_location),
                password=settings.ssl_key_password or None,
            )
    except ssl.SSLError as error:
        raise TlsSettingsError(f"ssl.keystore or ssl.truststore: {error}") from None


def _file(location: str) -> str:
    path = Path(location).expanduser()
    if not path.is_file():
        raise TlsSettingsError(f"{location}: no such file")
    return str(path)


def server_context(settings: BrokerSettings, *, sasl: bool = False) -> ssl.SSLContext:
    """The context of a broker's or the controller's SSL listener; `sasl` for a SASL_SSL one,
    whose clients prove who they are with SASL: there `ssl.client.auth` does not apply and no
    certificate is asked for, as in Kafka since KIP-684."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    _load(context, settings, own_cert=True)
    context.verify_mode = ssl.CERT_NONE if sasl else CLIENT_AUTH[settings.ssl_client_auth]
    return context


def client_context(settings: BrokerSettings) -> ssl.SSLContext:
    """The context rlog's own processes connect to an SSL listener with."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if not settings.ssl_truststore_location:
        context.load_default_certs()
    _load(context, settings, own_cert=True)
    context.check_hostname = settings.ssl_endpoint_identification_algorithm == "https"
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def client_tls_files(settings: BrokerSettings) -> dict[str, str]:
    """What a Kafka client needs to connect as rlog's own clients do, under librdkafka's (and
    the Java client's PEM) property names; the key's password is left out on purpose."""
    properties = {"security.protocol": "SSL"}
    if settings.ssl_truststore_location:
        properties["ssl.ca.location"] = settings.ssl_truststore_location
    if settings.ssl_keystore_location:
        properties["ssl.certificate.location"] = settings.ssl_keystore_location
        properties["ssl.key.location"] = settings.ssl_keystore_location
    if settings.ssl_endpoint_identification_algorithm != "https":
        properties["ssl.endpoint.identification.algorithm"] = "none"
    return properties


class TlsSession:
    """One connection's TLS state: ciphertext in and out as bytes, plaintext in and out."""

    def __init__(
        self, context: ssl.SSLContext, *, server_side: bool, server_hostname: str | None = None
    ) -> None:
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._ssl = context.wrap_bio(
            self._incoming, self._outgoing, server_side=server_side, server_hostname=server_hostname
        )
        self.handshaken = False
        self.closed_by_peer = False  # the peer sent close_notify

    def receive(self, ciphertext: bytes) -> bytes:
        """Take bytes from the socket (b"": it closed); the plaintext they complete. Raises
        ssl.SSLError if the handshake fails or a record is bad: close the connection (after
        sending `take_output()`, which may hold the alert)."""
        if ciphertext:
            self._incoming.write(ciphertext)
        else:
            self._incoming.write_eof()
        if not self.handshaken:
            try:
                self._ssl.do_handshake()
            except ssl.SSLWantReadError:
                return b""
            self.handshaken = True
        chunks = []
        while True:
            try:
                chunk = self._ssl.read(_READ_BYTES)
            except ssl.SSLWantReadError:
                break
            except ssl.SSLZeroReturnError:
                chunk = b""
            if not chunk:  # Python's ssl reads b"" once the peer's close_notify is in
                self.closed_by_peer = True
                self._answer_close_notify()
                break
            chunks.append(chunk)
        return b"".join(chunks)

    def _answer_close_notify(self) -> None:
        """Send our close_notify back (it waits in `take_output()`): asyncio's SSL transport,
        aiokafka's among them, waits for it up to 30 s before its close completes."""
        with contextlib.suppress(ssl.SSLError):
            self._ssl.unwrap()

    def send(self, plaintext: bytes | bytearray | memoryview) -> None:
        """Encrypt `plaintext`; its records wait in `take_output()`."""
        self._ssl.write(plaintext)

    def take_output(self) -> bytes:
        """Ciphertext to write to the socket (handshake messages, records, alerts)."""
        return self._outgoing.read()

    def peer_certificate(self) -> dict[str, object] | None:
        return self._ssl.getpeercert() or None

    def peer_certificate_der(self) -> bytes | None:
        """The client's certificate (DER), if it sent one that the truststore accepted."""
        return self._ssl.getpeercert(binary_form=True) or None
