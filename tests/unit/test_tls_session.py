"""The broker's TLS session (daemon/tls.py) against a client made with Python's own `ssl`, both
over memory buffers: handshake, records both ways, and the end of a connection."""

from __future__ import annotations

import ssl
from pathlib import Path

import pytest

from rlog.cli.certificates import DemoFiles, demo_files
from rlog.daemon.tls import TlsSession


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> DemoFiles:
    return demo_files(tmp_path_factory.mktemp("tls"))


class Client:
    """A TLS client over memory BIOs; `pump` moves bytes until neither side has any."""

    def __init__(self, files: DemoFiles, server: TlsSession) -> None:
        context = ssl.create_default_context(cafile=str(files.ca))
        context.load_cert_chain(files.client)
        self.incoming, self.outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        self.ssl = context.wrap_bio(self.incoming, self.outgoing, server_hostname="localhost")
        self.server = server
        self.received = b""  # plaintext the server got

    def pump(self) -> None:
        for _ in range(10):
            data = self.outgoing.read()
            if data:
                self.received += self.server.receive(data)
            answer = self.server.take_output()
            if answer:
                self.incoming.write(answer)
            if not data and not answer:
                return

    def handshake(self) -> None:
        for _ in range(5):
            try:
                self.ssl.do_handshake()
                return
            except ssl.SSLWantReadError:
                self.pump()
        raise AssertionError("no handshake")


def server_session(files: DemoFiles) -> TlsSession:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(Path(files.broker))
    return TlsSession(context, server_side=True)


def test_records_pass_both_ways(files: DemoFiles) -> None:
    server = server_session(files)
    client = Client(files, server)
    client.handshake()
    client.ssl.write(b"request")
    client.pump()
    assert client.received == b"request" and not server.closed_by_peer
    server.send(b"answer")
    client.pump()
    assert client.ssl.read(100) == b"answer"


def test_a_close_notify_is_answered_with_ours(files: DemoFiles) -> None:
    """asyncio's SSL transport (aiokafka's) waits for the server's close_notify before its
    close completes, 30 s if none comes."""
    server = server_session(files)
    client = Client(files, server)
    client.handshake()
    with pytest.raises(ssl.SSLWantReadError):
        client.ssl.unwrap()  # sends the client's close_notify, waits for the server's
    client.pump()
    assert server.closed_by_peer
    client.ssl.unwrap()  # the server's close_notify is in: no SSLWantReadError
