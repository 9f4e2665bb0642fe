"""One broker's rules as a sans-IO state machine: the contract the controller's core has too.

    core.step(event, now_ms)  # metadata, a client request, a coordinator's append, an answer
    core.tick(now_ms)         # produce and fetch deadlines, ISR shrinking, the flush policy
    ready = core.ready()      # syncs, then peer requests and ISR proposals, then responses
    core.advance(ready, failed_syncs=...)

It owns the replicas this broker hosts (hosting.py), serves the leader side of Produce and Fetch
(answers are held while they wait: acks=all for the ISR, a long-polling fetch for data, an
answer whose batch must first be fsynced under the flush policy), runs the follower side
(fetch_sessions.py), and turns the replicas' ISR proposals into requests to the controller.
Durability is only ever a `Sync` in a Ready: a simulated crash loses exactly what was not synced.

A `LogDirFailed` step takes the log dir offline for good, as Kafka's LogDirFailureChannel does:
the hosted partitions answer KAFKA_STORAGE_ERROR, what waits on them fails, followers stop
fetching, the coordinators unload, and nothing is written or synced again (not even by close()).
The daemon decides when the dir failed and restarts the process once its disk works again.
"""

from __future__ import annotations

import errno
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from itertools import count

from rlog.core import limits
from rlog.core.broker.config import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    TRANSACTION_STATE_TOPIC,
    BrokerConfig,
)
from rlog.core.broker.fetch_sessions import FollowerFetching
from rlog.core.broker.group_hosting import GROUP_APIS, WRITE_TIMEOUT_MS, GroupHosting, Loaded
from rlog.core.broker.hosting import HostedReplicas
from rlog.core.broker.markers import MarkerDelivery
from rlog.core.broker.messages import (
    Append,
    AppendAnswer,
    Body,
    ClientRequest,
    Event,
    IsrProposal,
    LogDirFailed,
    MetadataChanged,
    PeerAnswered,
    ProducerIdsGranted,
    ProposalAnswered,
    Ready,
    Sync,
    Token,
    TopicPartition,
)
from rlog.core.broker.produce import ProduceJob, produce_partition_body
from rlog.core.broker.producer_ids import ProducerIdPool
from rlog.core.broker.record_deletion import RecordDeletion
from rlog.core.broker.serving import (
    CONSUMER_REPLICA_ID,
    READ_COMMITTED,
    describe_producers,
    empty_fetch_partition,
    epoch_end_offset,
    fetch_partition,
    list_offsets,
    not_hosted_error,
    offline_fetch_error,
)
from rlog.core.broker.traffic import TrafficCounters
from rlog.core.broker.txn_hosting import TXN_APIS, TxnHosting, TxnLoaded
from rlog.core.broker.verification import TxnVerification
from rlog.core.controller.api import ReplicaLogEnd
from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.records import BatchHeader, CorruptRecordError, may_be_transactional, read_header
from rlog.core.replication import (
    AlterPartitionResponse,
    AppendOutcome,
    CompleteProduce,
    Effect,
    HighWatermarkChanged,
    ProposeIsr,
    Replica,
    Truncated,
    TxnMarker,
)
from rlog.core.storage.files import Buffer, FileSlice, FileSystem


@dataclass
class _ParkedFetch:
    token: Token
    body: Body
    replica_id: int
    deadline_ms: int
    keys: frozenset[TopicPartition]
    api_version: int
    arrival: int  # the order fetches arrived in: woken fetches are served in it


class BrokerCore:
    def __init__(
        self,
        config: BrokerConfig,
        data_dir: str,
        fs: FileSystem,
        now_ms: int,
        *,
        new_member_id: Callable[[str], str] | None = None,
    ) -> None:
        """`new_member_id`: a group member id for a client id; unique across restarts and
        brokers (the daemon's are Kafka's `client-id-UUID`). The default counts, for tests."""
        self.config = config
        self.data_dir = data_dir
        self.hosted = HostedReplicas(config, data_dir, fs, now_ms)
        # Why the log dir went offline (LogDirFailed), None while it works.
        self.offline: str | None = None
        self.image = MetadataImage()
        self.traffic = TrafficCounters()
        self.followers = FollowerFetching(config, self._handle, self._appended_as_follower)
        self.groups = GroupHosting(
            config.groups,
            new_member_id or _counting_member_ids(config.broker_id),
            self._group_write,
            self._respond,
        )
        self.producer_ids = ProducerIdPool()
        self.markers = MarkerDelivery(
            config.broker_id, self._write_marker, config.replica_socket_timeout_ms
        )
        self.txns = TxnHosting(
            config.transactions, self._txn_write, self._respond, self.producer_ids, self.markers
        )
        self.verification = TxnVerification(config.broker_id, config.replica_socket_timeout_ms)
        self.deletions = RecordDeletion(self._respond)
        self._now_ms = now_ms
        self.groups.observe_clock(now_ms)
        self.txns.observe_clock(now_ms)
        self._out = Ready()
        self._handed_out: Ready | None = None
        self._tokens = count()
        self._acks: dict[tuple[TopicPartition, int], tuple[ProduceJob, int]] = {}
        self._syncs: dict[TopicPartition, int] = {}  # partition -> offset to sync below
        self._sync_waiters: dict[TopicPartition, list[tuple[ProduceJob, int]]] = {}
        self._syncing: dict[TopicPartition, list[tuple[ProduceJob, int]]] = {}
        self._parked: dict[Token, _ParkedFetch] = {}
        self._parked_on: dict[TopicPartition, set[Token]] = {}
        self._arrivals = count()
        self._woken: set[TopicPartition] = set()  # changed: every fetch parked there is served
        # Only the HW moved: only consumers' parked fetches are served (they read below it); a
        # follower's waits for records, as Kafka's DelayedFetch does, and learns the HW from its
        # next answer. Waking followers too served each of their fetches three times a produce.
        self._hw_moved: set[TopicPartition] = set()
        # -> (partition, the replica's proposal, deadline)
        self._proposals: dict[Token, tuple[TopicPartition, ProposeIsr, int]] = {}
        self._hw_dirty = False
        self._metadata_retry = False  # a partition's state could not be taken (disk error)
        self._registered = False
        self._due_checkpoints: set[str] = set()
        self._next_flush_ms = now_ms + config.log_flush_scheduler_interval_ms
        self._next_recovery_checkpoint_ms = now_ms + config.log_flush_offset_checkpoint_interval_ms
        self._next_hw_checkpoint_ms = now_ms + config.high_watermark_checkpoint_interval_ms
        self._next_retention_ms = now_ms + config.log_retention_check_interval_ms
        self._next_producer_expiry_ms = now_ms + config.producer_id_expiration_check_interval_ms

    # ---- what the daemon, the CLI and the tests read ----

    def replica(self, topic: str, partition: int) -> Replica | None:
        return self.hosted.get((topic, partition))

    @property
    def replicas(self) -> dict[TopicPartition, Replica]:
        return self.hosted.replicas

    # ---- what the controller link sends ----

    @property
    def previous_broker_epoch(self) -> int:
        """The broker epoch of the last clean shutdown, -1 after a crash (BrokerRegistration's
        PreviousBrokerEpoch)."""
        return self.hosted.logs.previous_broker_epoch

    def recovering_log_ends(self) -> list[ReplicaLogEnd]:
        """This broker's log end in every recovering partition it hosts (told in heartbeats:
        the controller elects the longest log)."""
        if not self._registered or self.offline is not None:
            return []  # states of an earlier incarnation; or logs we can no longer vouch for
        told = []
        for key, info in self.hosted.assigned(self.image):
            replica = self.hosted.get(key)
            if info.recovering and replica is not None:
                end = replica.log_end_offset
                written = [e.epoch for e in replica.epochs.entries if e.start_offset < end]
                told.append(ReplicaLogEnd(*key, written[-1] if written else -1, end))
        return told

    # ---- the contract ----

    def step(self, event: Event, now_ms: int, *, settle: bool = True) -> None:
        """Take one event. With `settle` False the consequences that gather (parked fetches
        its data wakes, the followers' next requests) wait for `settle()`: a driver that steps
        every request read in one pass of its loop and then settles once answers a follower's
        fetch once with all of them, instead of once per request."""
        assert self._handed_out is None, "step() between ready() and advance()"
        now_ms = self._observe_clock(now_ms)
        if isinstance(event, ClientRequest):
            self._serve_request(event, now_ms)
        elif isinstance(event, PeerAnswered):
            if self.markers.owns(event.token):
                self.markers.on_answer(event.token, event.body, self.image, self._out.peer_requests)
            elif self.verification.owns(event.token):
                self.verification.on_answer(event.token, event.body)
            else:
                self.followers.on_answer(event.token, event.body, now_ms)
        elif isinstance(event, ProducerIdsGranted):
            self.producer_ids.granted(event.first, event.count)
        elif isinstance(event, Append):
            job = ProduceJob(event.token, event.acks, api_version=None)
            position = job.add(event.topic, event.partition)
            job.all_added()
            key = (event.topic, event.partition)
            self._append(job, position, key, event.records, event.acks, event.timeout_ms, now_ms)
            self._finish_if_done(job)
        elif isinstance(event, ProposalAnswered):
            self._on_proposal_answer(event.token, event.response, now_ms)
        elif isinstance(event, MetadataChanged):
            self.image = event.image
            self._registered = event.registered
            if event.registered and self.offline is None:
                self._apply_metadata(event.image, event.caught_up, now_ms)
        elif isinstance(event, LogDirFailed):
            self._take_offline(event.reason, now_ms)
        else:
            raise AssertionError(f"not a broker event: {event!r}")
        if settle:
            self._settle(now_ms)

    def settle(self, now_ms: int) -> None:
        """What steps taken with `settle=False` left to do; see `step`."""
        assert self._handed_out is None, "settle() between ready() and advance()"
        self._settle(self._observe_clock(now_ms))

    def tick(self, now_ms: int) -> None:
        assert self._handed_out is None, "tick() between ready() and advance()"
        now_ms = self._observe_clock(now_ms)
        for key, replica in self.hosted if self.offline is None else ():
            self._handle(key, replica.tick(now_ms))
        for token, (_key, _proposal, deadline_ms) in list(self._proposals.items()):
            if now_ms >= deadline_ms:  # lost request or answer: the replica must hear an error
                self._on_proposal_answer(
                    token, AlterPartitionResponse(ErrorCode.REQUEST_TIMED_OUT), now_ms
                )
        for parked in [p for p in self._parked.values() if now_ms >= p.deadline_ms]:
            self._serve_parked(parked, now_ms)
        if self._metadata_retry and self._registered and self.offline is None:
            self._apply_metadata(self.image, False, now_ms)
        self.followers.tick(now_ms)
        self.groups.tick(now_ms)
        self.txns.tick(now_ms)
        self.markers.tick(self.image, now_ms, self._out.peer_requests)
        self.verification.tick(now_ms)
        self.deletions.expire(now_ms)
        self._periodic_duties(now_ms)
        self._settle(now_ms)

    def has_ready(self) -> bool:
        return self._handed_out is None and bool(self._out or self._syncs)

    def ready(self) -> Ready:
        """Everything queued since the last Ready; `advance` it before asking for another."""
        assert self._handed_out is None, "ready() again before advance()"
        ready = self._out
        ready.syncs = [Sync(topic, index, offset) for (topic, index), offset in self._syncs.items()]
        self._syncing, self._sync_waiters, self._syncs = self._sync_waiters, {}, {}
        self._out = Ready()
        self._handed_out = ready
        return ready

    def advance(self, ready: Ready, *, failed_syncs: Collection[Sync] = ()) -> None:
        """`ready` was done: its syncs (but `failed_syncs`) are durable, its messages sent.
        Answers that waited for a sync go out in the next Ready."""
        assert ready is self._handed_out, "advance() of a Ready not handed out, or twice"
        self._handed_out = None
        failed = {(s.topic, s.partition) for s in failed_syncs}
        for key, waiters in self._syncing.items():
            for job, position in waiters:
                if key in failed:
                    job.fill(position, AppendAnswer(
                        ErrorCode.KAFKA_STORAGE_ERROR,
                        message=f"storage error: the fsync of {key[0]}-{key[1]} failed",
                        storage_failed=True,
                    ))  # fmt: skip
                else:
                    job.synced(position)
                self._finish_if_done(job)
        if self._syncing:  # answers that waited: their jobs may now be done
            self._syncing = {}
            self._settle(self._now_ms)

    # ---- files the caller handles when a Ready says so ----

    def sync(self, sync: Sync) -> None:
        """Do one of a Ready's syncs (OSError if the disk fails it)."""
        if self.offline is not None:
            raise OSError(errno.EIO, f"log dir offline: {self.offline}")
        log = self.hosted.logs.get(sync.topic, sync.partition)
        if log is not None:
            log.flush(sync.offset)

    def write_checkpoints(self) -> None:
        """Write the checkpoint files a Ready asked for (OSError if the disk fails it)."""
        due, self._due_checkpoints = self._due_checkpoints, set()
        if self.offline is not None:
            return
        if "recovery" in due:
            self.hosted.logs.checkpoint()
        if "hw" in due:
            self._hw_dirty = False
            self.hosted.checkpoint_high_watermarks()

    def close(self) -> None:
        """Clean shutdown: flush every log, write every checkpoint, and the clean-shutdown file
        with this process's broker epoch (if it registered). With the log dir offline: only
        close the files, so the next start recovers as after a crash."""
        if self.offline is not None:
            self.hosted.abandon()
            return
        me = self.image.brokers.get(self.config.broker_id)
        self.hosted.close(me.epoch if self._registered and me is not None else -1)

    # ---- metadata ----

    def _apply_metadata(self, image: MetadataImage, caught_up: bool, now_ms: int) -> None:
        self._metadata_retry = False
        hosted = self.hosted
        assigned: set[TopicPartition] = set()
        for key, info in hosted.assigned(image):
            assigned.add(key)
            if hosted.replaced(image, key):
                self._fail_acks_of(key, f"{key[0]}-{key[1]} was deleted")
            try:
                replica = hosted.open_or_update(image, key)
                if hosted.applied.get(key) == info:
                    continue
                state = hosted.partition_state(info)
                self._handle(key, replica.apply_partition_state(state, now_ms))
            except OSError as error:
                # A failing disk: the replica keeps its last state (a role change writes its
                # epoch checkpoint before anything else changes) and the next tick tries again.
                self._out.log_messages.append(
                    f"storage error taking {key[0]}-{key[1]}'s new state, will retry: {error}"
                )
                self._metadata_retry = True
                continue
            hosted.applied[key] = info
            self._woken.add(key)  # fetches waiting here must see the new role
        for key in [k for k in hosted.replicas if k not in assigned]:
            hosted.remove(key, image)
            self._fail_acks_of(key, f"{key[0]}-{key[1]} was removed")
            self._woken.add(key)
        if caught_up:
            hosted.delete_strays(image)
        self.followers.regroup(list(hosted.replicas.items()))
        # Leadership of __consumer_offsets partitions decides which groups this broker serves,
        # that of __transaction_state partitions which transactional ids.
        self.groups.on_metadata(image, lambda p: hosted.get((OFFSETS_TOPIC, p)), now_ms)
        self.txns.on_metadata(image, lambda p: hosted.get((TRANSACTION_STATE_TOPIC, p)), now_ms)

    def _fail_acks_of(self, key: TopicPartition, message: str) -> None:
        for ack_key in [k for k in self._acks if k[0] == key]:
            job, position = self._acks.pop(ack_key)
            job.acked(position, ErrorCode.NOT_LEADER_OR_FOLLOWER, message)
            self._finish_if_done(job)

    # ---- a failed log dir ----

    def _take_offline(self, reason: str, now_ms: int) -> None:
        """Stop using the log dir for good: fail what waits on it, stop following, unload the
        coordinators, answer the parked fetches; later requests get KAFKA_STORAGE_ERROR."""
        if self.offline is not None:
            return
        self.offline = reason
        message = f"storage error: log dir {self.data_dir} is offline ({reason})"
        hosted = len(self.hosted.replicas)
        self._out.log_messages.append(
            f"log dir {self.data_dir} is offline ({reason}): KAFKA_STORAGE_ERROR for its "
            f"{hosted} partition{'' if hosted == 1 else 's'} until the broker restarts"
        )
        failed = AppendAnswer(ErrorCode.KAFKA_STORAGE_ERROR, message=message, storage_failed=True)
        waiting = list(self._acks.values())
        for waiters in self._sync_waiters.values():
            waiting += waiters
        self._acks, self._sync_waiters, self._syncs = {}, {}, {}
        for job, position in waiting:
            job.fill(position, failed)
            self._finish_if_done(job)
        self._proposals = {}  # a late answer finds nothing to give it to
        self._due_checkpoints = set()
        self._hw_dirty = self._metadata_retry = False
        self.followers.regroup([])  # answers still in flight are ignored
        self.deletions.fail_all(ErrorCode.KAFKA_STORAGE_ERROR)
        self.groups.on_metadata(self.image, lambda _p: None, now_ms)  # clients find another
        self.txns.on_metadata(self.image, lambda _p: None, now_ms)
        self._woken.update(self.hosted.replicas)  # parked fetches get the error now

    # ---- effects of the replicas ----

    def _handle(self, key: TopicPartition, effects: Sequence[Effect]) -> None:
        for effect in effects:
            if isinstance(effect, CompleteProduce):
                waiting = self._acks.pop((key, effect.pending_id), None)
                if waiting is not None:
                    job, position = waiting
                    job.acked(position, effect.error)
                    self._finish_if_done(job)
            elif isinstance(effect, HighWatermarkChanged):
                self._hw_dirty = True
                self._hw_moved.add(key)
            elif isinstance(effect, ProposeIsr):
                token = ("isr", next(self._tokens))
                deadline_ms = self._now_ms + self.config.replica_socket_timeout_ms
                self._proposals[token] = (key, effect, deadline_ms)
                self._out.proposals.append(IsrProposal(token, effect))
            elif isinstance(effect, Truncated):
                self._out.truncations.append(effect)
                self._hw_dirty = True
                self._woken.add(key)

    def _on_proposal_answer(
        self, token: Token, response: AlterPartitionResponse, now_ms: int
    ) -> None:
        found = self._proposals.pop(token, None)
        if found is None:
            return  # late: it timed out already and the replica heard an error
        key, proposal, _deadline_ms = found
        replica = self.hosted.get(key)
        if replica is not None:
            effects = replica.on_alter_partition_response(response, now_ms, proposal=proposal)
            self._handle(key, effects)

    def _appended_as_follower(self, key: TopicPartition) -> None:
        replica = self.hosted.get(key)
        if replica is not None and replica.log.flush_due(self._now_ms):
            self._syncs[key] = replica.log_end_offset
        self._woken.add(key)

    # ---- requests ----

    def _serve_request(self, request: ClientRequest, now_ms: int) -> None:
        api_key = request.api_key
        if api_key in GROUP_APIS:
            self.groups.serve(
                request.token,
                api_key,
                request.api_version,
                request.body,
                request.client_id,
                request.client_host,
                self.image,
                now_ms,
            )
        elif api_key in TXN_APIS:
            self.txns.serve(
                request.token,
                api_key,
                request.api_version,
                request.body,
                request.client_id,
                request.client_host,
                now_ms,
            )
        else:
            self._serve(request, now_ms)

    def _serve(self, request: ClientRequest, now_ms: int) -> None:
        api_key = request.api_key
        if api_key == ApiKey.PRODUCE:
            self._produce(request, now_ms)
        elif api_key == ApiKey.FETCH:
            self._fetch(request, now_ms)
        elif api_key == ApiKey.LIST_OFFSETS:
            self._respond(request.token, self._list_offsets(request.body, request.api_version))
        elif api_key == ApiKey.DESCRIBE_PRODUCERS:
            self._respond(request.token, self._describe_producers(request.body))
        elif api_key == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            self._respond(request.token, self._epoch_end_offsets(request.body))
        elif api_key == ApiKey.DELETE_RECORDS:
            offline = self.offline is not None
            self.deletions.serve(
                request.token, request.body, request.client_id, self.hosted.get, self.image,
                now_ms, offline=offline,
            )  # fmt: skip
        elif api_key == ApiKey.WRITE_TXN_MARKERS:
            self._write_txn_markers(request)
        else:
            raise AssertionError(f"the broker core does not serve API {api_key}")

    def _respond(self, token: Token, body: Body | AppendAnswer | None) -> None:
        if self.verification.owns(token):  # the hosted coordinator answered our own question
            assert isinstance(body, dict)
            self.verification.on_answer(token, body)
            return
        self._out.responses.append((token, body))

    # ---- produce ----

    def _produce(self, request: ClientRequest, now_ms: int) -> None:
        body = request.body
        acks = body["acks"]
        job = ProduceJob(request.token, acks, api_version=request.api_version)
        for topic in body["topic_data"]:
            name = topic["name"]
            for data in topic["partition_data"]:
                position = job.add(name, data["index"])
                key = (name, data["index"])
                if acks not in (0, 1, -1):
                    job.fill(position, AppendAnswer(ErrorCode.INVALID_REQUIRED_ACKS))
                elif name in INTERNAL_TOPICS:  # only its coordinators write there, as in Kafka
                    job.fill(position, AppendAnswer(
                        ErrorCode.INVALID_TOPIC_EXCEPTION,
                        message=f"Cannot append to internal topic {name}",
                    ))  # fmt: skip
                else:
                    records = data["records"]
                    timeout_ms = body["timeout_ms"]
                    opening = self._opens_transaction(key, records)
                    if opening is not None:
                        self._verify_then_append(
                            job, position, key, records, acks, timeout_ms, opening, body
                        )
                    else:
                        self._append(job, position, key, records, acks, timeout_ms, now_ms)
        job.all_added()
        self._finish_if_done(job)

    def _opens_transaction(self, key: TopicPartition, records: Buffer | None) -> BatchHeader | None:
        """The header of a transactional batch that would open its producer's transaction on
        this partition (KIP-890: verify it with the coordinator first), else None."""
        if not records or not may_be_transactional(records):
            return None  # most batches: no header parsed here
        replica = self.hosted.get(key)
        if replica is None or not replica.is_leader:
            return None
        try:
            header = read_header(records)
        except CorruptRecordError:
            return None  # the append refuses it
        if not header.is_transactional or header.is_control or header.producer_id < 0:
            return None
        if replica.producers.has_open_transaction(header.producer_id, header.producer_epoch):
            return None
        return header

    def _verify_then_append(
        self,
        job: ProduceJob,
        position: int,
        key: TopicPartition,
        records: Buffer | None,
        acks: int,
        timeout_ms: int,
        header: BatchHeader,
        body: Body,
    ) -> None:
        def verdict(error: ErrorCode) -> None:
            if error == ErrorCode.NONE:
                self._append(job, position, key, records, acks, timeout_ms, self._now_ms)
            else:
                message = f"{key[0]}-{key[1]} is not in the producer's transaction"
                job.fill(position, AppendAnswer(error, message=message))
            self._finish_if_done(job)

        def ask_locally(token: Token, question: Body) -> None:
            self.txns.serve(token, ApiKey.ADD_PARTITIONS_TO_TXN, 4, question, "", "", self._now_ms)

        self.verification.ask(
            key,
            body.get("transactional_id"),
            header.producer_id,
            header.producer_epoch,
            verdict,
            self.image,
            self._now_ms,
            self._out.peer_requests,
            ask_locally,
        )

    def _append(
        self,
        job: ProduceJob,
        position: int,
        key: TopicPartition,
        records: Buffer | None,
        acks: int,
        timeout_ms: int,
        now_ms: int,
        *,
        marker: TxnMarker | None = None,
    ) -> None:
        """Append a producer's batch (or, with `marker`, a transaction marker) as leader and
        fill the job's slot now or once the acks and syncs it waits for are done."""
        replica = self.hosted.get(key)
        if replica is None:
            job.fill(position, AppendAnswer(not_hosted_error(self.image, *key)))
            return
        if self.offline is not None:
            job.fill(position, AppendAnswer(
                ErrorCode.KAFKA_STORAGE_ERROR,
                message=f"storage error: log dir {self.data_dir} is offline ({self.offline})",
                storage_failed=True,
            ))  # fmt: skip
            return
        end_before = replica.log_end_offset
        try:
            outcome: AppendOutcome
            if marker is not None:
                outcome = replica.append_marker(
                    marker, now_ms, required_acks_timeout_ms=max(0, timeout_ms)
                )
            else:
                outcome = replica.append_as_leader(
                    records,
                    acks,
                    now_ms,
                    required_acks_timeout_ms=max(0, timeout_ms),
                    client=job.api_version is not None,
                )
        except OSError as error:
            job.fill(position, AppendAnswer(
                ErrorCode.KAFKA_STORAGE_ERROR,
                message=f"storage error: {error}",
                storage_failed=True,
            ))  # fmt: skip
            return
        result = outcome.result
        if result.error != ErrorCode.NONE:
            self._handle(key, outcome.effects)
            job.fill(position, AppendAnswer(
                result.error,
                log_start_offset=result.log_start_offset,
                message=result.error_message,
                record_errors=result.record_errors,
            ))  # fmt: skip
            return
        offsets = replica.log_end_offset - end_before
        if offsets and job.api_version is not None:  # a client's records, not a coordinator's
            self.traffic.produced(offsets, len(records or b""))
        answer = AppendAnswer(
            ErrorCode.NONE,
            result.base_offset,
            result.log_append_time_ms,
            result.log_start_offset,
            offsets=offsets,
        )
        # Also for an idempotent retry (no offsets taken): its batch may be unsynced yet.
        needs_sync = replica.log.flush_due(now_ms)
        job.appended(
            position, answer, waits_for_ack=outcome.pending is not None, waits_for_sync=needs_sync
        )
        if outcome.pending is not None:
            self._acks[(key, outcome.pending.pending_id)] = (job, position)
        if needs_sync:
            self._syncs[key] = replica.log_end_offset
            self._sync_waiters.setdefault(key, []).append((job, position))
        self._woken.add(key)  # followers waiting for new records
        self._handle(key, outcome.effects)

    def _group_write(
        self, partition: int, batch: bytes, on_done: Callable[[AppendAnswer], None]
    ) -> None:
        """The group coordinator's write: acks=all to its offsets partition, here."""
        self._coordinator_write((OFFSETS_TOPIC, partition), batch, None, on_done)

    def _txn_write(
        self, partition: int, batch: bytes, on_done: Callable[[AppendAnswer], None]
    ) -> None:
        """The transaction coordinator's write: acks=all to its state partition, here."""
        self._coordinator_write((TRANSACTION_STATE_TOPIC, partition), batch, None, on_done)

    def _coordinator_write(
        self,
        key: TopicPartition,
        batch: bytes | None,
        marker: TxnMarker | None,
        on_done: Callable[[AppendAnswer], None],
    ) -> None:
        """A coordinator's batch (or a transaction marker) appended here as leader with acks=all;
        `on_done` hears how it ended."""
        job = ProduceJob(None, -1, api_version=None, on_done=on_done)
        position = job.add(*key)
        job.all_added()
        self._append(job, position, key, batch, -1, WRITE_TIMEOUT_MS, self._now_ms, marker=marker)
        self._finish_if_done(job)

    # ---- transaction markers ----

    def _write_marker(
        self, key: TopicPartition, marker: TxnMarker, on_done: Callable[[ErrorCode], None]
    ) -> None:
        """Append a transaction marker as the partition's leader (acks=all). Once the ISR has
        it, a marker on __consumer_offsets settles the producer's transactional offsets."""

        def done(answer: AppendAnswer) -> None:
            if answer.error == ErrorCode.NONE and key[0] == OFFSETS_TOPIC:
                self.groups.complete_transaction(
                    key[1], marker.producer_id, marker.committed, self._now_ms
                )
            on_done(answer.error)

        self.verification.marker_written(key, marker.producer_id)
        self._coordinator_write(key, None, marker, done)

    def _write_txn_markers(self, request: ClientRequest) -> None:
        """WriteTxnMarkers from a transaction coordinator: each marker to each partition, answered
        once every one has its outcome. A marker refused at once (too few in-sync replicas) ends
        before the next is appended, so the loop holds one count of its own until all are under
        way: else the answer went out then, telling NONE for markers not yet replicated."""
        results: list[Body] = []
        waiting = [1]

        def respond_when_done() -> None:
            if waiting[0] == 0:
                self._respond(request.token, {"markers": results})

        for entry in request.body.get("markers") or []:
            marker = TxnMarker(
                entry["producer_id"],
                entry["producer_epoch"],
                entry["coordinator_epoch"],
                bool(entry["transaction_result"]),
            )
            topics: list[Body] = []
            results.append({"producer_id": marker.producer_id, "topics": topics})
            for topic in entry.get("topics") or []:
                partitions: list[Body] = []
                topics.append({"name": topic["name"], "partitions": partitions})
                for index in topic.get("partition_indexes") or []:
                    answer: Body = {"partition_index": index, "error_code": ErrorCode.NONE}
                    partitions.append(answer)
                    waiting[0] += 1

                    def written(error: ErrorCode, answer: Body = answer) -> None:
                        answer["error_code"] = error
                        waiting[0] -= 1
                        respond_when_done()

                    self._write_marker((topic["name"], index), marker, written)
        waiting[0] -= 1
        respond_when_done()

    def _finish_if_done(self, job: ProduceJob) -> None:
        if not job.done or job.answered:
            return
        job.answered = True
        if job.on_done is not None:
            answer = job.answers[0]
            assert answer is not None
            job.on_done(answer)
            return
        if job.api_version is None:  # an Append: one partition, its answer as it is
            self._respond(job.token, job.answers[0])
            return
        if job.acks == 0:
            self._respond(job.token, None)  # acks=0: the client expects no answer at all
            return
        responses: list[Body] = []
        for (name, index), answer in zip(job.partitions, job.answers, strict=True):
            if not responses or responses[-1]["name"] != name:
                responses.append({"name": name, "partition_responses": []})
            assert answer is not None
            body = produce_partition_body(index, answer, job.api_version)
            responses[-1]["partition_responses"].append(body)
        self._respond(job.token, {"responses": responses, "throttle_time_ms": 0})

    # ---- fetch ----

    def _fetch(self, request: ClientRequest, now_ms: int) -> None:
        body = request.body
        max_wait_ms = max(0, min(body["max_wait_ms"], limits.FETCH_MAX_WAIT_MS_MAX))
        keys = frozenset(
            (t["topic"], p["partition"]) for t in body["topics"] for p in t["partitions"]
        )
        parked = _ParkedFetch(
            request.token,
            body,
            body.get("replica_id", CONSUMER_REPLICA_ID),
            now_ms + max_wait_ms,
            keys,
            request.api_version,
            next(self._arrivals),
        )
        self._serve_parked(parked, now_ms)

    def _serve_parked(self, parked: _ParkedFetch, now_ms: int, *, force: bool = False) -> None:
        """Answer the fetch if it has enough bytes, an error or no more time (or `force`);
        else park it until one of its partitions changes or its deadline passes."""
        # A follower's fetch state (its LEO, whether it caught up, the HW) is taken once, when
        # the request arrives; serving it again after it waited only reads, as Kafka's
        # DelayedFetch does.
        arrived = parked.token not in self._parked
        responses, total_bytes, has_error = self._fetch_once(
            parked.body, parked.replica_id, parked.api_version, arrived=arrived
        )
        final = (
            force
            or total_bytes >= parked.body["min_bytes"]
            or has_error
            or now_ms >= parked.deadline_ms
            or not parked.keys
            or (len(self._parked) >= limits.FETCH_WAITING_MAX and parked.token not in self._parked)
        )
        if not final:
            if parked.token not in self._parked:
                self._parked[parked.token] = parked
                for key in parked.keys:
                    self._parked_on.setdefault(key, set()).add(parked.token)
            return
        self._unpark(parked)
        if parked.replica_id == CONSUMER_REPLICA_ID:
            self._count_fetched(parked.body, responses)
        self._respond(
            parked.token,
            {"throttle_time_ms": 0, "error_code": ErrorCode.NONE, "session_id": 0,
             "responses": responses},
        )  # fmt: skip

    def _answer_followers_waiting_on(self, keys: set[TopicPartition], now_ms: int) -> None:
        """Answer the followers' parked fetches on `keys` now: their answers carry the new log
        start, which the followers take and report back in their next fetch (DeleteRecords
        waits for that, not for replica.fetch.wait.max.ms)."""
        tokens = set().union(*(self._parked_on.get(key, ()) for key in keys))
        for parked in sorted((self._parked[t] for t in tokens), key=lambda p: p.arrival):
            if parked.replica_id >= 0 and parked.token in self._parked:
                self._serve_parked(parked, now_ms, force=True)

    def _unpark(self, parked: _ParkedFetch) -> None:
        if self._parked.pop(parked.token, None) is None:
            return
        for key in parked.keys:
            tokens = self._parked_on.get(key)
            if tokens is not None:
                tokens.discard(parked.token)
                if not tokens:
                    del self._parked_on[key]

    def _fetch_once(
        self, body: Body, replica_id: int, api_version: int, *, arrived: bool = True
    ) -> tuple[list[Body], int, bool]:
        budget = body.get("max_bytes", 2**31 - 1)
        total_bytes = 0
        has_error = False
        responses = []
        for topic in body["topics"]:
            name = topic["topic"]
            partitions = []
            for request in topic["partitions"]:
                key = (name, request["partition"])
                if self.offline is not None and key in self.hosted.replicas:
                    error = offline_fetch_error(api_version)
                    partitions.append(empty_fetch_partition(request["partition"], error))
                    has_error = True
                    continue
                max_bytes = max(0, min(request["partition_max_bytes"], budget - total_bytes))
                answer, effects = fetch_partition(
                    self.hosted.get(key),
                    self.image,
                    name,
                    request,
                    replica_id,
                    max_bytes,
                    self._now_ms,
                    min_one_batch=total_bytes == 0,
                    read_committed=body.get("isolation_level", 0) == READ_COMMITTED,
                    arrived=arrived,
                )
                self._handle(key, effects)
                records = answer["records"]
                total_bytes += len(records) if isinstance(records, bytes) else records.size
                has_error |= answer["error_code"] != ErrorCode.NONE
                if "diverging_epoch" in answer:
                    total_bytes += 1  # a divergence is news the follower needs at once
                partitions.append(answer)
            responses.append({"topic": name, "partitions": partitions})
        return responses, total_bytes, has_error

    def _count_fetched(self, body: Body, responses: list[Body]) -> None:
        for topic, answer in zip(body["topics"], responses, strict=True):
            for request, partition in zip(topic["partitions"], answer["partitions"], strict=True):
                records = partition["records"]
                if isinstance(records, FileSlice):
                    self.traffic.fetched(request["fetch_offset"], records.next_offset, records.size)

    # ---- ListOffsets, DescribeProducers, OffsetForLeaderEpoch ----

    def _list_offsets(self, body: Body, api_version: int) -> Body:
        offline = self.offline is not None
        return list_offsets(body, api_version, self.image, self.hosted.get, offline=offline)

    def _describe_producers(self, body: Body) -> Body:
        """Any replica answers (not only the leader), as in Kafka."""
        offline = self.offline is not None
        return describe_producers(body, self.image, self.hosted.get, offline=offline)

    def _epoch_end_offsets(self, body: Body) -> Body:
        topics = []
        for topic in body["topics"]:
            name = topic["topic"]
            partitions = [
                self._offline_answer(name, p["partition"], "partition", leader_epoch=-1,
                                     end_offset=-1)
                or epoch_end_offset(self.hosted.get((name, p["partition"])), self.image, name, p)
                for p in topic["partitions"]
            ]  # fmt: skip
            topics.append({"topic": name, "partitions": partitions})
        return {"throttle_time_ms": 0, "topics": topics}

    def _offline_answer(self, topic: str, index: int, index_key: str, **fields: int) -> Body | None:
        """KAFKA_STORAGE_ERROR for a partition hosted in the offline log dir, else None."""
        if self.offline is None or (topic, index) not in self.hosted.replicas:
            return None
        return {index_key: index, "error_code": ErrorCode.KAFKA_STORAGE_ERROR, **fields}

    # ---- time ----

    def _observe_clock(self, now_ms: int) -> int:
        """The time the rules use: wall-clock time may step back (NTP), the rules' never does."""
        if now_ms > self._now_ms:  # most events of a pass come within the same millisecond
            self._now_ms = now_ms
            self.groups.observe_clock(now_ms)
            self.txns.observe_clock(now_ms)
        return self._now_ms

    def _periodic_duties(self, now_ms: int) -> None:
        if self.offline is not None:
            return  # no flush, checkpoint, retention or expiry: the dir is not used again
        config = self.config
        if now_ms >= self._next_flush_ms:  # the flush scheduler: flush.ms and rolled segments
            self._next_flush_ms = now_ms + config.log_flush_scheduler_interval_ms
            for key, replica in self.hosted:
                log = replica.log
                if log.flush_due(now_ms) or log.has_unflushed_sealed_segments:
                    self._syncs[key] = max(self._syncs.get(key, 0), log.log_end_offset)
        if now_ms >= self._next_recovery_checkpoint_ms:
            self._next_recovery_checkpoint_ms = (
                now_ms + config.log_flush_offset_checkpoint_interval_ms
            )
            self._due_checkpoints.add("recovery")
        if now_ms >= self._next_hw_checkpoint_ms:
            self._next_hw_checkpoint_ms = now_ms + config.high_watermark_checkpoint_interval_ms
            if self._hw_dirty:
                self._due_checkpoints.add("hw")
        if now_ms >= self._next_producer_expiry_ms:
            self._next_producer_expiry_ms = now_ms + config.producer_id_expiration_check_interval_ms
            for _key, replica in self.hosted:
                replica.log.producers.expire(now_ms, config.producer_id_expiration_ms)
        if now_ms >= self._next_retention_ms:
            self._next_retention_ms = now_ms + config.log_retention_check_interval_ms
            for _key, replica in self.hosted:  # only below the HW, as Kafka
                if replica.log.delete_retained_segments(now_ms, replica.high_watermark):
                    # The epochs of deleted segments go with them, as when the log start moves.
                    replica.epochs.truncate_from_start(replica.log.log_start_offset)
        self._out.checkpoints = bool(self._due_checkpoints)

    def _settle(self, now_ms: int) -> None:
        """After any change: answer parked fetches whose partitions changed, then let idle
        follower sessions send their next request."""
        deletions = self.deletions
        if deletions.has_waiting:  # DeleteRecords waiting for the followers' log starts
            deletions.check(self.hosted.get, self.image)
        if deletions.moved:  # deleted records stay deleted, on every replica
            self._answer_followers_waiting_on(deletions.moved, now_ms)
            deletions.moved = set()
            self._due_checkpoints.add("recovery")
            self._out.checkpoints = True
        while self._woken or self._hw_moved:
            woken, self._woken = self._woken, set()
            hw_moved, self._hw_moved = self._hw_moved, set()
            tokens = set().union(*(self._parked_on.get(key, ()) for key in woken))
            for key in hw_moved - woken:
                tokens.update(
                    token
                    for token in self._parked_on.get(key, ())
                    if self._parked[token].replica_id < 0  # a consumer's, not a follower's
                )
            # In arrival order: deterministic, and cheaper than ordering the tokens themselves.
            woken_fetches = sorted(
                (self._parked[token] for token in tokens), key=lambda parked: parked.arrival
            )
            for parked in woken_fetches:
                if parked.token in self._parked:  # not answered by an earlier one's effects
                    self._serve_parked(parked, now_ms)
        self.followers.plan(now_ms, self._out.peer_requests)
        out = self._out
        txn_requests = self.txns.take_peer_requests()
        if txn_requests:
            out.peer_requests += txn_requests
        # Most settles have nothing below: each list is looked at before it is replaced.
        if self.groups.events:
            out.group_events += self.groups.events
            self.groups.events = []
        if self.txns.events:
            out.txn_events += self.txns.events
            self.txns.events = []
        if self.producer_ids.wants_block:
            self.producer_ids.wants_block = False
            out.wants_producer_ids = True
        if self.txns.loaded:
            out.log_messages += [_describe_txn_load(loaded) for loaded in self.txns.loaded]
            self.txns.loaded = []
        if self.hosted.log_messages:
            out.log_messages += self.hosted.log_messages
            self.hosted.log_messages = []
        if self.groups.loaded:
            out.log_messages += [_describe_load(loaded) for loaded in self.groups.loaded]
            self.groups.loaded = []


def _counting_member_ids(broker_id: int) -> Callable[[str], str]:
    numbers = count(1)
    return lambda client_id: f"{client_id}-{broker_id}-{next(numbers)}"


def _describe_load(loaded: Loaded | int) -> str:
    if isinstance(loaded, int):
        return f"no longer coordinator for {OFFSETS_TOPIC}-{loaded}"
    summary = loaded.summary
    corrupt = summary.corrupt_records
    return (
        f"coordinator for {OFFSETS_TOPIC}-{loaded.partition} (leader epoch "
        f"{loaded.leader_epoch}): loaded {summary.groups} groups, {summary.offsets} offsets"
        + (f", skipped {corrupt} corrupt records" if corrupt else "")
    )


def _describe_txn_load(loaded: TxnLoaded | int) -> str:
    if isinstance(loaded, int):
        return f"no longer transaction coordinator for {TRANSACTION_STATE_TOPIC}-{loaded}"
    summary = loaded.summary
    corrupt = summary.corrupt_records
    return (
        f"transaction coordinator for {TRANSACTION_STATE_TOPIC}-{loaded.partition} (coordinator "
        f"epoch {loaded.coordinator_epoch}): loaded {summary.transactions} transactional ids, "
        f"{summary.resumed} ending resumed"
        + (f", skipped {corrupt} corrupt records" if corrupt else "")
    )
