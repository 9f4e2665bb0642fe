"""The broker process's side of the broker core: every rule is in `BrokerCore`; this module
steps it with what arrives (client requests, metadata, peers' and the controller's answers, the
clock) and does what each Ready says, in order: fsync, then send, then answer.

The listener hands client requests over with a callback the answer is given to (`submit`);
the broker's own coroutines (the group service) await a future instead (`request`). Events are
stepped as they arrive, and the core settles once per pass of the event loop, after everything
read in that pass: under load a follower's parked fetch is answered once for many produces.
Requests to peers go out with a callback that steps the answer back in, requests to the
controller as tasks; a failed one is stepped back as failed, so the core never waits forever.

After each drain the driver looks at the log dir's health (log_dir.py): the first failed or too
slow storage call is stepped into the core as `LogDirFailed`, journaled (`log_dir_failed`), and
`offline` is set for the broker's recovery duty.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from itertools import count
from typing import Any

from rlog.core.broker import (
    Append,
    AppendAnswer,
    Body,
    BrokerCore,
    ClientRequest,
    Event,
    PeerAnswered,
    PeerRequest,
    ProducerIdsGranted,
    ProposalAnswered,
    Ready,
    Sync,
)
from rlog.core.broker.messages import LogDirFailed
from rlog.core.groups import GroupEvent
from rlog.core.protocol.apis import ApiKey
from rlog.core.replication import AlterPartitionResponse, ProposeIsr, Truncated
from rlog.core.transactions import TxnEvent
from rlog.daemon.broker.log_dir import LogDirHealth
from rlog.daemon.events import EventJournal
from rlog.daemon.wire import WireError

log = logging.getLogger(__name__)

# Sends a leader's ISR proposal to the controller and returns its answer (an error if lost).
AlterPartitionSender = Callable[[ProposeIsr], Awaitable[AlterPartitionResponse]]
# Sends a replica's request to a peer broker; the callback gets its answer, or None if it
# failed, always later from the event loop (never inside the call: a Ready is held then).
PeerSender = Callable[[PeerRequest, Callable[[Body | None], None]], None]
# Asks the controller for a block of producer ids: (first id, count); raises if it cannot.
ProducerIdSource = Callable[[], Awaitable[tuple[int, int]]]


def now_ms() -> int:
    """Wall-clock ms: segment ages and record timestamps use it, as Kafka does."""
    return time.time_ns() // 1_000_000


class BrokerDriver:
    def __init__(
        self,
        core: BrokerCore,
        journal: EventJournal | None = None,
        log_dir: LogDirHealth | None = None,
    ) -> None:
        self.core = core
        self.journal = journal  # replica events (truncations), if main gives a journal
        self.log_dir = log_dir  # the file system's verdict on the log dir, if it keeps one
        self.offline = asyncio.Event()  # set once the core took the log dir offline
        self._alter_partition: AlterPartitionSender | None = None
        self._send_to_peer: PeerSender | None = None
        self._producer_ids: ProducerIdSource | None = None
        self._waiting: dict[Any, asyncio.Future[Any]] = {}
        self._replies: dict[Any, Callable[[Body | None], None]] = {}  # submit()'s callbacks
        self._tokens = count()
        self._background: set[asyncio.Task[None]] = set()
        self._settle_scheduled = False
        self._closed = False
        # The loop, looked up once: asyncio.get_running_loop() asks the kernel for the pid on
        # every call, and step() runs for every request.
        self._loop: asyncio.AbstractEventLoop | None = None

    def connect(
        self,
        alter_partition: AlterPartitionSender,
        send_to_peer: PeerSender,
        producer_ids: ProducerIdSource | None = None,
    ) -> None:
        self._alter_partition = alter_partition
        self._send_to_peer = send_to_peer
        self._producer_ids = producer_ids

    # ---- inputs ----

    def step(self, event: Event) -> None:
        """Step `event` now; settle and do the Ready once this pass of the event loop has
        handed over everything it read (`BrokerCore.step`'s `settle`): under load, one answer
        to a follower's parked fetch carries every produce read in the same pass."""
        if self._closed:
            return  # an answer that arrived while the broker stopped
        if self.log_dir is not None and self.log_dir.failure is not None:
            # A write earlier in this pass failed the log dir: the core must know before the
            # next request, as Kafka's log refuses every call once its dir is offline. Else the
            # next Produce of a pipelining idempotent producer is checked against the state the
            # failed append never updated, and answered OUT_OF_ORDER_SEQUENCE_NUMBER instead of
            # KAFKA_STORAGE_ERROR. librdkafka bumps its epoch on that and sends every record not
            # yet acknowledged again as new, including those of appended batches whose wait for
            # the ISR the failure ended: duplicates, once a follower has them.
            self._take_log_dir_failure(settle=False)
        self.core.step(event, now_ms(), settle=False)
        if not self._settle_scheduled:
            self._settle_scheduled = True
            loop = self._loop
            if loop is None:
                loop = self._loop = asyncio.get_running_loop()
            loop.call_soon(self._settle)

    def _settle(self) -> None:
        self._settle_scheduled = False
        if self._closed:
            return
        self.core.settle(now_ms())
        self._drain()

    def tick(self) -> None:
        self.core.tick(now_ms())
        self._drain()

    async def request(
        self,
        api_key: ApiKey,
        api_version: int,
        body: Body,
        client_id: str | None = None,
        client_host: str = "",
    ) -> Body | None:
        """A client's request the core serves, as the core answers it (None: acks=0)."""
        token = ("client", next(self._tokens))
        future = self._expect(token)
        self.step(ClientRequest(token, api_key, api_version, body, client_id or "", client_host))
        try:
            return await future
        finally:
            self._waiting.pop(token, None)

    def submit(
        self,
        api_key: ApiKey,
        api_version: int,
        body: Body,
        client_id: str | None,
        client_host: str,
        reply: Callable[[Body | None], None],
    ) -> None:
        """A client's request the core serves; `reply` takes the core's answer (None: acks=0),
        perhaps before this returns. The listener's way: no future or task per request."""
        token = ("client", next(self._tokens))
        self._replies[token] = reply
        self.step(ClientRequest(token, api_key, api_version, body, client_id or "", client_host))

    async def append(
        self, topic: str, partition: int, records: bytes, acks: int, timeout_ms: int
    ) -> AppendAnswer:
        """Append one batch as the partition's leader (the group coordinator's writes)."""
        token = ("append", next(self._tokens))
        future = self._expect(token)
        self.step(Append(token, topic, partition, records, acks, timeout_ms))
        return await future

    def _expect(self, token: Any) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[token] = future
        return future

    # ---- outputs ----

    def _drain(self) -> None:
        self._do_readies()
        if self._take_log_dir_failure():
            self._do_readies()

    def _take_log_dir_failure(self, *, settle: bool = True) -> bool:
        """Step the log dir's failure into the core, once; whether it did. `settle` False: in
        the middle of a pass, whose end settles the core (step)."""
        failure = self.log_dir.failure if self.log_dir is not None else None
        if failure is None or self.core.offline is not None:
            return False
        broker_id = self.core.config.broker_id
        log.error("log dir %s failed: %s", self.core.data_dir, failure)
        if self.journal is not None:
            self.journal.record(
                "log_dir_failed",
                f"broker {broker_id}: log dir {self.core.data_dir} offline: {failure}",
                broker=broker_id,
                log_dir=self.core.data_dir,
                reason=failure,
            )
        self.core.step(LogDirFailed(failure), now_ms(), settle=settle)
        self.offline.set()
        return True

    def _do_readies(self) -> None:
        core = self.core
        while core.has_ready():
            ready = core.ready()
            failed = self._sync(ready)
            for request in ready.peer_requests:
                self._ask_peer(request)
            for proposal in ready.proposals:
                self._spawn(self._propose(proposal.token, proposal.proposal))
            if ready.wants_producer_ids:
                self._spawn(self._take_producer_ids())
            for token, answer in ready.responses:
                reply = self._replies.pop(token, None)
                if reply is not None:
                    reply(answer)
                    continue
                future = self._waiting.pop(token, None)
                if future is not None and not future.done():
                    future.set_result(answer)
            if ready.checkpoints:
                try:
                    core.write_checkpoints()
                except OSError as error:
                    log.error("writing checkpoints failed: %s", error)
            for truncated in ready.truncations:
                self.record_truncation(truncated)
            for event in ready.group_events:
                self.record_group_event(event)
            for txn_event in ready.txn_events:
                self.record_txn_event(txn_event)
            for message in ready.log_messages:
                log.info("%s", message)
            core.advance(ready, failed_syncs=failed)

    def _sync(self, ready: Ready) -> list[Sync]:
        failed = []
        for sync in ready.syncs:
            try:
                self.core.sync(sync)
            except OSError as error:
                log.error("fsync of %s-%d failed: %s", sync.topic, sync.partition, error)
                failed.append(sync)
        return failed

    def _ask_peer(self, request: PeerRequest) -> None:
        sender = self._send_to_peer
        assert sender is not None, "connect() first"
        token = request.token
        sender(request, lambda answer: self.step(PeerAnswered(token, answer)))

    async def _take_producer_ids(self) -> None:
        first, count = -1, 0
        if self._producer_ids is not None:
            try:
                first, count = await self._producer_ids()
            except (WireError, RuntimeError) as error:
                log.warning("no producer id block from the controller: %s", error)
        self.step(ProducerIdsGranted(first, count))

    async def _propose(self, token: Any, proposal: ProposeIsr) -> None:
        sender = self._alter_partition
        assert sender is not None, "connect() first"
        log.info(
            "proposing ISR %s for %s-%d (leader epoch %d, partition epoch %d)",
            list(proposal.new_isr),
            proposal.topic,
            proposal.partition,
            proposal.leader_epoch,
            proposal.partition_epoch,
        )
        answer = await sender(proposal)
        self.step(ProposalAnswered(token, answer))

    def record_truncation(self, effect: Truncated) -> None:
        whole = " (whole log: behind the leader's log start)" if effect.full else ""
        log.info(
            "truncated %s-%d to offset %d%s", effect.topic, effect.partition, effect.offset, whole
        )
        if self.journal is not None:
            self.journal.record(
                "replica_truncated",
                f"broker {self.core.config.broker_id} truncated {effect.topic}-{effect.partition} "
                f"to offset {effect.offset}" + (" (whole log)" if effect.full else ""),
                topic=effect.topic,
                partition=effect.partition,
                offset=effect.offset,
                broker=self.core.config.broker_id,
                full=effect.full,
            )

    def record_group_event(self, event: GroupEvent) -> None:
        log.info("%s", event.message)
        if self.journal is not None:
            self.journal.record(
                event.kind,
                event.message,
                group=event.group_id,
                generation=event.generation,
                broker=self.core.config.broker_id,
            )

    def record_txn_event(self, event: TxnEvent) -> None:
        log.info("%s", event.message)
        if self.journal is not None:
            self.journal.record(
                event.kind,
                event.message,
                transactional_id=event.transactional_id,
                broker=self.core.config.broker_id,
            )

    def _spawn(self, coroutine: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coroutine)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def close(self) -> None:
        """Clean shutdown: flush every log and write checkpoints, so start-up re-reads nothing."""
        self._closed = True
        for task in self._background:
            task.cancel()
        for future in self._waiting.values():
            if not future.done():
                future.cancel()
        self._replies.clear()
        self.core.close()
