"""KIP-890 transaction verification on a partition's leader.

A transactional batch that would open a transaction on a partition (its producer has none open
here in that epoch) is appended only once the producer's transaction coordinator confirms that
the partition is in the producer's ongoing transaction (AddPartitionsToTxn v4, verify_only).
Without the check, a late or retried batch arriving after its transaction ended (aborted by a
timeout, fenced by a new instance) would open a transaction no coordinator knows of: it never
gets a marker, and the partition's LSO, and every read_committed consumer, stop there for good.

The coordinator is the leader of the transactional id's `__transaction_state` partition; when
that is this broker the question is asked of the hosted coordinator directly. A guard per
(partition, producer) remembers the question: a marker appended for that producer meanwhile
ends the transaction, so the answer no longer holds and the batch is refused.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import count

from rlog.core.broker.config import TRANSACTION_STATE_TOPIC
from rlog.core.broker.messages import Body, PeerRequest, Token, TopicPartition
from rlog.core.metadata.image import MetadataImage
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode
from rlog.core.transactions import transaction_partition

VERIFY_VERSION = 4
VERIFY_CHANNEL = "verify"
# What the producer is told when the coordinator could not be asked: retriable, as Kafka does.
UNREACHABLE = ErrorCode.NOT_ENOUGH_REPLICAS
RETRIABLE_COORDINATOR_ERRORS = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.REQUEST_TIMED_OUT,
    }
)

# Called with the outcome: NONE (append it), or the error to answer the batch with.
Verdict = Callable[[ErrorCode], None]


@dataclass
class _Question:
    key: TopicPartition
    producer_id: int
    guard: object
    verdict: Verdict
    deadline_ms: int


class TxnVerification:
    def __init__(self, broker_id: int, timeout_ms: int) -> None:
        self._broker_id = broker_id
        self._timeout_ms = timeout_ms
        self._ids = count()
        self._questions: dict[Token, _Question] = {}
        self._guards: dict[tuple[TopicPartition, int], object] = {}

    @staticmethod
    def owns(token: Token) -> bool:
        return isinstance(token, tuple) and bool(token) and token[0] == VERIFY_CHANNEL

    def ask(
        self,
        key: TopicPartition,
        transactional_id: str | None,
        producer_id: int,
        producer_epoch: int,
        verdict: Verdict,
        image: MetadataImage,
        now_ms: int,
        out: list[PeerRequest],
        ask_locally: Callable[[Token, Body], None],
    ) -> None:
        """Ask the coordinator whether `key` is in the producer's transaction."""
        if not transactional_id:
            verdict(ErrorCode.INVALID_TXN_STATE)  # a transactional batch needs its id
            return
        topic = image.topics.get(TRANSACTION_STATE_TOPIC)
        info = None
        if topic is not None:
            info = topic.partitions.get(
                transaction_partition(transactional_id, len(topic.partitions))
            )
        if info is None or info.leader < 0:
            verdict(UNREACHABLE)
            return
        # Shared by every question about this producer here until a marker ends its transaction.
        guard = self._guards.setdefault((key, producer_id), object())
        token = (VERIFY_CHANNEL, next(self._ids))
        self._questions[token] = _Question(
            key, producer_id, guard, verdict, now_ms + self._timeout_ms
        )
        body = {
            "transactions": [
                {
                    "transactional_id": transactional_id,
                    "producer_id": producer_id,
                    "producer_epoch": producer_epoch,
                    "verify_only": True,
                    "topics": [{"name": key[0], "partitions": [key[1]]}],
                }
            ]
        }
        if info.leader == self._broker_id:
            ask_locally(token, body)
        else:
            out.append(
                PeerRequest(
                    token,
                    info.leader,
                    ApiKey.ADD_PARTITIONS_TO_TXN,
                    VERIFY_VERSION,
                    body,
                    self._timeout_ms,
                    channel=VERIFY_CHANNEL,
                )
            )

    def on_answer(self, token: Token, body: Body | None) -> None:
        question = self._questions.pop(token, None)
        if question is None:
            return  # late: answered already (timed out)
        error = _error_of(body, question.key) if body is not None else ErrorCode.REQUEST_TIMED_OUT
        guard = self._guards.get((question.key, question.producer_id))
        if error == ErrorCode.NONE and guard is not question.guard:
            error = ErrorCode.INVALID_TXN_STATE  # a marker ended the transaction meanwhile
        question.verdict(_for_producer(error))

    def marker_written(self, key: TopicPartition, producer_id: int) -> None:
        """A marker for the producer ended its transaction here: pending answers are stale."""
        self._guards.pop((key, producer_id), None)

    def tick(self, now_ms: int) -> None:
        for token, question in list(self._questions.items()):
            if now_ms >= question.deadline_ms:
                self.on_answer(token, None)


def _error_of(body: Body, key: TopicPartition) -> ErrorCode:
    if body.get("error_code"):
        return ErrorCode(body["error_code"])
    for txn in body.get("results_by_transaction") or []:
        for topic in txn.get("topic_results") or []:
            if topic.get("name") != key[0]:
                continue
            for partition in topic.get("results_by_partition") or []:
                if partition.get("partition_index") == key[1]:
                    return ErrorCode(partition.get("partition_error_code", 0))
    return ErrorCode.UNKNOWN_SERVER_ERROR


def _for_producer(error: ErrorCode) -> ErrorCode:
    """The coordinator's answer as the Produce error: retriable while it cannot say, else the
    batch is refused (INVALID_TXN_STATE, or a fenced epoch)."""
    if error == ErrorCode.NONE:
        return error
    if error in RETRIABLE_COORDINATOR_ERRORS:
        return UNREACHABLE
    if error in (ErrorCode.PRODUCER_FENCED, ErrorCode.INVALID_PRODUCER_EPOCH):
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return ErrorCode.INVALID_TXN_STATE
