"""Followers replicate by fetching from their leaders, like Kafka's replica fetcher threads.

One session per leader broker, with at most one request in flight, covering every partition this
broker follows there. A session first asks the leader's ApiVersions and fetches with the highest
Fetch version both sides know (v12 adds last_fetched_epoch and DivergingEpoch answers; an older
leader gets v11). Then, each round: ListOffsets for partitions whose fetch offset the leader
refused, else OffsetForLeaderEpoch for partitions that must find where their log diverges
(KIP-101/279), else one Fetch with our replica id for the rest. The leader holds a fetch until it
has new records or replica.fetch.wait.max.ms passes, so an answer is followed at once by the
next request. A failed request backs the session off; a partition's error backs that partition
off. The replicas decide everything; this module builds the requests and reads the answers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from itertools import count

from rlog.core.broker.config import BrokerConfig
from rlog.core.broker.messages import Body, PeerRequest, Token, TopicPartition
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.replication import Effect, FetchPlan, Replica, TruncationPlan
from rlog.core.storage.files import FileSlice
from rlog.core.values import value

FETCH_VERSION_MIN = 4  # the oldest Fetch rlog brokers serve
FETCH_VERSION_MAX = 12  # the newest a follower sends (v13 names topics by id)
LAST_FETCHED_EPOCH_VERSION = 12  # Fetch v12: last_fetched_epoch asks for DivergingEpoch
OFFSET_FOR_LEADER_EPOCH_VERSION = 3  # the first with replica_id
LIST_OFFSETS_VERSION = 4
API_VERSIONS_VERSION = 0  # every broker answers v0
LATEST_TIMESTAMP = -1

# What a session does with a replica's outcome: its effects, and whether it appended records.
EffectSink = Callable[[TopicPartition, Sequence[Effect]], None]
AppendSink = Callable[[TopicPartition], None]


def fetch_version_for(leader_fetch_max: int) -> int:
    """The Fetch version a follower sends to a leader that serves up to `leader_fetch_max`."""
    return max(FETCH_VERSION_MIN, min(FETCH_VERSION_MAX, leader_fetch_max))


@dataclass
class _Session:
    leader_id: int
    fetch_version: int | None = None  # None: ask the leader's ApiVersions first
    in_flight: Token | None = None
    deadline_ms: int = 0
    retry_at_ms: int = 0  # after a failed request
    delayed: dict[TopicPartition, int] = field(default_factory=dict)  # partition -> until
    # Partitions whose fetch offset the leader refused: the leader's log start, while its log
    # end is asked with ListOffsets.
    out_of_range: dict[TopicPartition, int] = field(default_factory=dict)


@value
class _Sent:
    session: _Session
    kind: ApiKey
    plans: dict[TopicPartition, FetchPlan | TruncationPlan | int]  # int: the leader epoch


class FollowerFetching:
    def __init__(self, config: BrokerConfig, on_effects: EffectSink, on_append: AppendSink):
        self._config = config
        self._on_effects = on_effects
        self._on_append = on_append
        self._followed: dict[int, list[tuple[TopicPartition, Replica]]] = {}
        # The same, by partition: answers are matched to replicas by key.
        self._followed_by_key: dict[int, dict[TopicPartition, Replica]] = {}
        self._sessions: dict[int, _Session] = {}
        self._sent: dict[Token, _Sent] = {}
        self._tokens = count()

    def regroup(self, replicas: Sequence[tuple[TopicPartition, Replica]]) -> None:
        """Roles changed: who follows which leader now (only metadata changes roles)."""
        followed: dict[int, list[tuple[TopicPartition, Replica]]] = {}
        for key, replica in replicas:
            if replica.is_follower:
                followed.setdefault(replica.leader, []).append((key, replica))
        self._followed = followed
        self._followed_by_key = {leader: dict(pairs) for leader, pairs in followed.items()}
        for leader_id in [i for i in self._sessions if i not in followed]:
            del self._sessions[leader_id]  # an answer still in flight is then ignored

    @property
    def leaders(self) -> list[int]:
        return sorted(self._followed)

    # ---- requests ----

    def plan(self, now_ms: int, out: list[PeerRequest]) -> None:
        """Send the next request of every idle session."""
        for leader_id, followed in self._followed.items():
            session = self._sessions.get(leader_id)
            if session is None:
                session = self._sessions[leader_id] = _Session(leader_id)
            if session.in_flight is not None or now_ms < session.retry_at_ms:
                continue
            request = self._next_request(session, followed, now_ms)
            if request is not None:
                session.in_flight = request.token
                session.deadline_ms = now_ms + request.timeout_ms
                out.append(request)

    def _next_request(
        self, session: _Session, followed: list[tuple[TopicPartition, Replica]], now_ms: int
    ) -> PeerRequest | None:
        if session.fetch_version is None:
            return self._request(session, ApiKey.API_VERSIONS, API_VERSIONS_VERSION, {}, {})
        delayed = session.delayed
        if delayed:
            for key in [k for k, until in delayed.items() if until <= now_ms]:
                del delayed[key]
        # What is still delayed is delayed past now.
        ready = [(k, r) for k, r in followed if k not in delayed] if delayed else followed
        if session.out_of_range:
            refused = [(k, r) for k, r in ready if k in session.out_of_range]
            if refused:
                return self._list_offsets(session, refused)
        truncations: dict[TopicPartition, TruncationPlan] = {}
        fetches: dict[TopicPartition, FetchPlan] = {}
        for key, replica in ready:
            plan = replica.follower_fetch_request()
            if isinstance(plan, FetchPlan):
                fetches[key] = plan
            elif isinstance(plan, TruncationPlan):
                truncations[key] = plan
        if truncations:
            return self._find_divergence(session, truncations)
        if fetches:
            return self._fetch(session, fetches)
        return None

    def _request(
        self,
        session: _Session,
        kind: ApiKey,
        version: int,
        body: Body,
        plans: dict[TopicPartition, FetchPlan | TruncationPlan | int],
        *,
        wait_ms: int = 0,
    ) -> PeerRequest:
        token = ("replica-fetch", next(self._tokens))
        self._sent[token] = _Sent(session, kind, plans)
        timeout_ms = self._config.replica_socket_timeout_ms + wait_ms
        return PeerRequest(token, session.leader_id, kind, version, body, timeout_ms)

    def _list_offsets(
        self, session: _Session, refused: list[tuple[TopicPartition, Replica]]
    ) -> PeerRequest:
        topics: dict[str, list[Body]] = {}
        for (topic, index), replica in refused:
            topics.setdefault(topic, []).append(
                {
                    "partition_index": index,
                    "current_leader_epoch": replica.leader_epoch,
                    "timestamp": LATEST_TIMESTAMP,
                }
            )
        body = {
            "replica_id": self._config.broker_id,
            "isolation_level": 0,
            "topics": [{"name": t, "partitions": ps} for t, ps in topics.items()],
        }
        plans: dict[TopicPartition, FetchPlan | TruncationPlan | int] = {
            k: r.leader_epoch for k, r in refused
        }
        return self._request(session, ApiKey.LIST_OFFSETS, LIST_OFFSETS_VERSION, body, plans)

    def _find_divergence(
        self, session: _Session, plans: dict[TopicPartition, TruncationPlan]
    ) -> PeerRequest:
        topics: dict[str, list[Body]] = {}
        for (topic, index), plan in plans.items():
            topics.setdefault(topic, []).append(
                {
                    "partition": index,
                    "current_leader_epoch": plan.current_leader_epoch,
                    "leader_epoch": plan.epoch,
                }
            )
        body = {
            "replica_id": self._config.broker_id,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
        }
        version = OFFSET_FOR_LEADER_EPOCH_VERSION
        return self._request(
            session, ApiKey.OFFSET_FOR_LEADER_EPOCH, version, body, dict(plans.items())
        )

    def _fetch(self, session: _Session, plans: dict[TopicPartition, FetchPlan]) -> PeerRequest:
        config = self._config
        version = session.fetch_version
        assert version is not None
        topics: dict[str, list[Body]] = {}
        for (topic, index), plan in plans.items():
            wanted: Body = {
                "partition": index,
                "current_leader_epoch": plan.current_leader_epoch,
                "fetch_offset": plan.fetch_offset,
                "log_start_offset": plan.log_start_offset,
                "partition_max_bytes": config.replica_fetch_max_bytes,
            }
            if version >= LAST_FETCHED_EPOCH_VERSION:
                wanted["last_fetched_epoch"] = plan.last_fetched_epoch
            topics.setdefault(topic, []).append(wanted)
        body = {
            "replica_id": config.broker_id,
            "max_wait_ms": config.replica_fetch_wait_max_ms,
            "min_bytes": 1,
            "max_bytes": max(
                config.replica_fetch_max_bytes, config.replica_fetch_response_max_bytes
            ),
            "isolation_level": 0,
            "session_id": 0,
            "session_epoch": -1,
            "topics": [{"topic": t, "partitions": ps} for t, ps in topics.items()],
            "forgotten_topics_data": [],
            "rack_id": "",
        }
        return self._request(
            session,
            ApiKey.FETCH,
            version,
            body,
            dict(plans.items()),
            wait_ms=config.replica_fetch_wait_max_ms,
        )

    # ---- answers ----

    def tick(self, now_ms: int) -> None:
        """A request past its deadline has failed (its answer, if it comes, is ignored)."""
        for session in self._sessions.values():
            if session.in_flight is not None and now_ms >= session.deadline_ms:
                self._sent.pop(session.in_flight, None)
                self._failed(session, now_ms)

    def owns(self, token: Token) -> bool:
        return token in self._sent

    def on_answer(self, token: Token, body: Body | None, now_ms: int) -> None:
        sent = self._sent.pop(token, None)
        if sent is None:
            return  # late (timed out) or unknown
        session = sent.session
        if self._sessions.get(session.leader_id) is not session or session.in_flight != token:
            return  # the session ended (the leader changed) while this was in flight
        session.in_flight = None
        if body is None:
            self._failed(session, now_ms)
            return
        if sent.kind == ApiKey.API_VERSIONS:
            self._on_api_versions(session, body, now_ms)
        elif sent.kind == ApiKey.LIST_OFFSETS:
            self._on_leader_end_offsets(session, sent, body, now_ms)
        elif sent.kind == ApiKey.OFFSET_FOR_LEADER_EPOCH:
            self._on_epoch_end_offsets(session, sent, body, now_ms)
        else:
            self._on_fetched(session, sent, body, now_ms)

    def _failed(self, session: _Session, now_ms: int) -> None:
        session.in_flight = None
        session.fetch_version = None  # a new connection may reach another broker version
        session.retry_at_ms = now_ms + self._config.replica_fetch_backoff_ms

    def _delay(self, session: _Session, key: TopicPartition, now_ms: int) -> None:
        session.delayed[key] = now_ms + self._config.replica_fetch_backoff_ms

    def _on_api_versions(self, session: _Session, body: Body, now_ms: int) -> None:
        fetch = [k for k in body.get("api_keys", ()) if k["api_key"] == ApiKey.FETCH]
        if body.get("error_code") != ErrorCode.NONE or not fetch:
            self._failed(session, now_ms)
            return
        session.fetch_version = fetch_version_for(fetch[0]["max_version"])

    def _replica(self, session: _Session, key: TopicPartition) -> Replica | None:
        followed = self._followed_by_key.get(session.leader_id)
        return None if followed is None else followed.get(key)

    def _answers(self, body: Body, topics_key: str, partitions_key: str, index_key: str):  # type: ignore[no-untyped-def]
        for topic in body.get(topics_key, ()):
            for found in topic.get("partitions", ()):
                yield (topic[partitions_key], found[index_key]), found

    def _on_leader_end_offsets(
        self, session: _Session, sent: _Sent, body: Body, now_ms: int
    ) -> None:
        for key, found in self._answers(body, "topics", "name", "partition_index"):
            epoch = sent.plans.get(key)
            replica = self._replica(session, key)
            if not isinstance(epoch, int) or replica is None:
                continue
            if found["error_code"] != ErrorCode.NONE:
                self._delay(session, key, now_ms)
                continue
            start = session.out_of_range.pop(key, None)
            if start is None:
                continue
            try:
                effects = replica.on_offset_out_of_range(start, found["offset"], leader_epoch=epoch)
            except OSError:  # a failing disk: ask again after the backoff
                session.out_of_range[key] = start
                self._delay(session, key, now_ms)
                continue
            self._on_effects(key, effects)

    def _on_epoch_end_offsets(
        self, session: _Session, sent: _Sent, body: Body, now_ms: int
    ) -> None:
        for key, found in self._answers(body, "topics", "topic", "partition"):
            plan = sent.plans.get(key)
            replica = self._replica(session, key)
            if not isinstance(plan, TruncationPlan) or replica is None:
                continue
            if found["error_code"] != ErrorCode.NONE:
                self._delay(session, key, now_ms)
                continue
            try:
                effects = replica.on_epoch_end_offset(
                    found["leader_epoch"],
                    found["end_offset"],
                    leader_epoch=plan.current_leader_epoch,
                )
            except OSError:  # a failing disk: the truncation is asked for again
                self._delay(session, key, now_ms)
                continue
            self._on_effects(key, effects)

    def _on_fetched(self, session: _Session, sent: _Sent, body: Body, now_ms: int) -> None:
        for key, found in self._answers(body, "responses", "topic", "partition_index"):
            plan = sent.plans.get(key)
            replica = self._replica(session, key)
            if not isinstance(plan, FetchPlan) or replica is None:
                continue
            self._apply_fetched(session, key, replica, plan, found, now_ms)

    def _apply_fetched(
        self,
        session: _Session,
        key: TopicPartition,
        replica: Replica,
        plan: FetchPlan,
        found: Body,
        now_ms: int,
    ) -> None:
        error = found["error_code"]
        epoch = plan.current_leader_epoch
        if error == ErrorCode.OFFSET_OUT_OF_RANGE:
            session.out_of_range[key] = found["log_start_offset"]
            return
        if error != ErrorCode.NONE:
            self._delay(session, key, now_ms)
            return
        diverging = found.get("diverging_epoch")
        if diverging is not None and diverging["epoch"] >= 0:
            try:
                effects = replica.on_epoch_end_offset(
                    diverging["epoch"], diverging["end_offset"], leader_epoch=epoch
                )
            except OSError:  # a failing disk: the next fetch is answered the same
                self._delay(session, key, now_ms)
                return
            self._on_effects(key, effects)
            return
        records = found["records"]
        if records is None:
            records = b""
        elif isinstance(records, FileSlice):  # a leader in this process (the simulator's)
            records = records.read()
        end_before = replica.log_end_offset
        try:
            effects = replica.on_fetch_response(
                records,
                found["high_watermark"],
                found["log_start_offset"],
                now_ms,
                leader_epoch=epoch,
            )
        except OSError:
            # A full or failing disk: this replica falls behind (and out of the ISR) until the
            # disk recovers; the leader still has everything.
            self._delay(session, key, now_ms)
            return
        self._on_effects(key, effects)
        if replica.log_end_offset != end_before:
            self._on_append(key)
