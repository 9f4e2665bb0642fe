"""Raw Kafka frames over a socket, for tests of what a broker does with bad input."""

from __future__ import annotations

import socket
import struct

from rlog.core.protocol.connection import NEED_DATA, ClientConnection


def exchange(address: tuple[str, int], frame: bytes, *, expect_reply: bool) -> bytes | None:
    """Send raw bytes; return the reply bytes, or None if the broker closed the connection."""
    with socket.create_connection(address, timeout=5) as raw:
        raw.sendall(frame)
        if not expect_reply:
            raw.shutdown(socket.SHUT_WR)
        data = b""
        try:
            while True:
                chunk = raw.recv(65536)
                if not chunk:
                    return data or None
                data += chunk
                if len(data) >= 4 and len(data) >= 4 + struct.unpack(">i", data[:4])[0]:
                    return data
        except TimeoutError:
            return data or None


def request(connection: ClientConnection, address, api_key: int, version: int, body: dict):
    with socket.create_connection(address, timeout=5) as raw:
        raw.sendall(connection.send_request(api_key, version, body))
        while True:
            event = connection.next_event()
            if event is not NEED_DATA:
                return event
            chunk = raw.recv(65536)
            assert chunk, "the broker closed the connection instead of answering"
            connection.receive_data(chunk)


def framed(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def header(api_key: int, version: int, correlation_id: int = 7) -> bytes:
    client_id = b"raw"
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
