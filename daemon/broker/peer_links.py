"""Connections to the other brokers, for the core's requests: a follower's (ApiVersions, Fetch,
OffsetForLeaderEpoch, ListOffsets) and a transaction coordinator's (WriteTxnMarkers). One
connection per peer and channel, found in the metadata image, reopened after a failure. Chaos
rules (network partitions, delays) apply per peer.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import Callable

from rlog.core.broker import Body, PeerRequest
from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.apis import ApiKey
from rlog.daemon.broker.faults import Faults
from rlog.daemon.data_dir import broker_name
from rlog.daemon.wire import KafkaClient, WireError

log = logging.getLogger(__name__)


class PeerLinks:
    def __init__(
        self,
        broker_id: int,
        image: Callable[[], MetadataImage],
        faults: Faults | None = None,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        """`tls`: the brokers' inter-broker listener speaks SSL (each peer is reached at the
        host and port it registered first: that listener's)."""
        self.broker_id = broker_id
        self._tls = tls
        self._image = image
        self._faults = faults
        self._clients: dict[tuple[int, str], KafkaClient] = {}

    def send(self, request: PeerRequest, on_answer: Callable[[Body | None], None]) -> None:
        """Send `request`; `on_answer` gets the peer's answer, or None if it could not be had in
        time, always later from the event loop (the driver sends while it holds a Ready)."""
        client = self._client(request.broker_id, request.channel)
        if client is None:
            asyncio.get_running_loop().call_soon(on_answer, None)
            return

        def answered(body: Body | None, error: WireError | None) -> None:
            if error is not None:
                name = ApiKey(request.api_key).name
                log.warning("%s to broker %d: %s", name, request.broker_id, error)
            on_answer(body if error is None else None)

        client.send(
            ApiKey(request.api_key),
            request.api_version,
            request.body,
            timeout_s=request.timeout_ms / 1000,
            on_answer=answered,
        )

    def _client(self, peer_id: int, channel: str) -> KafkaClient | None:
        """The connection to `peer_id` for requests of `channel` (each its own connection, so
        a marker never waits behind a long-polling fetch)."""
        broker = self._image().brokers.get(peer_id)
        if broker is None:
            return None
        client = self._clients.get((peer_id, channel))
        if client is not None and (client.host, client.port) == (broker.host, broker.port):
            return client
        if client is not None:
            client.close()
        gate = self._faults.gate(broker_name(peer_id)) if self._faults is not None else None
        client = KafkaClient(
            broker.host,
            broker.port,
            client_id=f"broker-{self.broker_id}-{channel}",
            gate=gate,
            tls=self._tls,
        )
        self._clients[(peer_id, channel)] = client
        return client

    def close(self) -> None:
        for client in self._clients.values():
            client.close()
