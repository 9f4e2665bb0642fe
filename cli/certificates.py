"""A local certificate authority for a TLS demo cluster (`rlog cluster up --tls`), with the
`cryptography` library.

    DATA_DIR/tls/ca.pem       the CA's certificate: every client's truststore
    DATA_DIR/tls/ca-key.pem   the CA's private key (owner-only), to issue more certificates
    DATA_DIR/tls/broker.pem   the brokers' and the controller's key and certificate chain
    DATA_DIR/tls/client.pem   a client's key and certificate (CN=rlog-client), for mutual TLS

Certificates name 127.0.0.1, ::1 and localhost, so clients that check host names accept them.
Keys are ECDSA P-256: small, fast, and every Kafka client's TLS library takes them. Private
keys are written unencrypted and readable by the owner only.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEMO_VALIDITY = datetime.timedelta(days=825)  # the longest public CAs issue; a demo lasts less
LOCAL_NAMES = ("localhost",)
LOCAL_ADDRESSES = ("127.0.0.1", "::1")


@dataclass(frozen=True)
class Authority:
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class DemoFiles:
    ca: Path
    broker: Path
    client: Path


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "rlog demo"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def new_authority(now: datetime.datetime | None = None) -> Authority:
    now = now or datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = _name("rlog demo CA")
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + DEMO_VALIDITY)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return Authority(certificate, key)


def issue(
    authority: Authority,
    common_name: str,
    *,
    not_before: datetime.datetime | None = None,
    not_after: datetime.datetime | None = None,
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """A certificate for `common_name` and this machine's local names, good for both ends of a
    TLS connection (server and client auth)."""
    now = datetime.datetime.now(datetime.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    alternative_names: list[x509.GeneralName] = [x509.DNSName(n) for n in LOCAL_NAMES]
    alternative_names += [x509.IPAddress(ipaddress.ip_address(a)) for a in LOCAL_ADDRESSES]
    certificate = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(authority.certificate.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before or now - datetime.timedelta(minutes=5))
        .not_valid_after(not_after or now + DEMO_VALIDITY)
        .add_extension(x509.SubjectAlternativeName(alternative_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .sign(authority.key, hashes.SHA256())
    )
    return certificate, key


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_certificate(certificate: x509.Certificate) -> bytes:
    return certificate.public_bytes(serialization.Encoding.PEM)


def _write_private(path: Path, data: bytes) -> None:
    """Owner-only from the first byte: the file is created 0600, never chmod-ed after."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def write_keystore(
    path: Path, certificate: x509.Certificate, key: ec.EllipticCurvePrivateKey, ca: Authority
) -> None:
    """One PEM file with the key and the chain (the certificate, then the CA's), as Kafka's
    PEM keystores and librdkafka's ssl.certificate.location / ssl.key.location take it."""
    chain = _pem_certificate(certificate) + _pem_certificate(ca.certificate)
    _write_private(path, _pem_key(key) + chain)


def load_authority(directory: Path) -> Authority:
    certificate = x509.load_pem_x509_certificate((directory / "ca.pem").read_bytes())
    key = serialization.load_pem_private_key((directory / "ca-key.pem").read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return Authority(certificate, key)


def demo_files(directory: Path) -> DemoFiles:
    """The demo's files in `directory`, made once: a cluster restarted with --tls keeps its CA,
    so clients configured for it keep working."""
    files = DemoFiles(directory / "ca.pem", directory / "broker.pem", directory / "client.pem")
    if files.ca.exists() and files.broker.exists() and files.client.exists():
        return files
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    authority = new_authority()
    _write_private(directory / "ca-key.pem", _pem_key(authority.key))
    files.ca.write_bytes(_pem_certificate(authority.certificate))
    write_keystore(files.broker, *issue(authority, "rlog-broker"), authority)
    write_keystore(files.client, *issue(authority, "rlog-client"), authority)
    return files
