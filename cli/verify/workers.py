"""The workload's clients, each a thread doing one thing at a time and recording it.

- `ProducerWorker` sends unique integer values one at a time, to partitions its seeded random
  source picks, and records each send's fate from its delivery report; with `transactional`
  it groups 1-4 sends into a transaction it commits (or, one time in ten, aborts).
- `ConsumerWorker` is a member of the run's group: it polls, records what it read with its
  assignment and a rebalance count, and commits synchronously what it read (manual commit).
- `drain` reads every partition from the start to the end offsets found after healing.

A client whose state can no longer be trusted (a fatal error, a send that never got a report)
is closed and replaced, and the worker takes a new process name: what the old client knew (its
producer id, its positions) is gone, and the checker must not compare across it.
"""

from __future__ import annotations

import contextlib
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)

from rlog.cli.verify.history import Commit, EndOffsets, F, OpType, Poll, Seek, Send, Txn
from rlog.cli.verify.recorder import Recorder

POLL_BATCH = 200  # records one consumer poll may return
POLL_TIMEOUT_S = 0.2
TXN_ABORT_RATIO = 0.1  # transactions the producer aborts on purpose
TXN_SENDS = (1, 4)  # sends per transaction
COMMIT_TRIES = 3  # tries of a transaction commit whose outcome is unknown before giving up

# Delivery errors that say the broker refused the record before writing it, and that librdkafka
# does not retry. Any other error may follow an attempt that was written (a timeout, an answer
# lost), so the send is indeterminate.
REFUSED_UNWRITTEN = {
    KafkaError.MSG_SIZE_TOO_LARGE,
    KafkaError.INVALID_RECORD,
    KafkaError.INVALID_MSG,  # CORRUPT_MESSAGE
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError._INVALID_ARG,
    KafkaError._UNKNOWN_PARTITION,
}
# Commit errors that say the group coordinator refused the commit: it did not happen.
COMMIT_REFUSED = {
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.FENCED_INSTANCE_ID,
    KafkaError._ASSIGNMENT_LOST,
    KafkaError._NO_OFFSET,
}


def error_of(exc: BaseException) -> KafkaError | None:
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def describe(error: KafkaError | BaseException) -> str:
    if isinstance(error, KafkaError):
        return f"{error.name()}: {error.str()}"
    found = error_of(error)
    return describe(found) if found is not None else f"{type(error).__name__}: {error}"


def parse_value(raw: bytes | None) -> int:
    """The integer a record holds; -1 for a record the workload did not write."""
    try:
        return int(raw or b"")
    except ValueError:
        return -1


class Values:
    """Unique values for the whole run, shared by every producer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next = 0

    def next(self) -> int:
        with self._lock:
            self._next += 1
            return self._next


@dataclass
class Workload:
    """What every worker shares."""

    topic: str
    partitions: int
    recorder: Recorder
    stop: threading.Event
    config: Callable[[str], dict[str, Any]]  # role -> a confluent-kafka config
    values: Values = field(default_factory=Values)
    txn_ids: Values = field(default_factory=Values)
    delivery_wait_s: float = 15.0  # longer than message.timeout.ms: the report always comes
    api_timeout_s: float = 10.0
    errors: list[str] = field(default_factory=list)  # what the workers could not handle


class _Stopping(Exception):
    """The run ended while a client was being replaced."""


class ProducerWorker(threading.Thread):
    def __init__(self, work: Workload, index: int, seed: int, transactional: bool) -> None:
        super().__init__(name=f"verify-producer-{index}", daemon=True)
        self.work, self.index, self.transactional = work, index, transactional
        self.rng = random.Random(seed * 1009 + index)
        self.incarnation = 0
        self.process = ""
        self.producer: Producer | None = None

    def run(self) -> None:
        try:
            self._open()
            while not self.work.stop.is_set():
                if self.transactional:
                    self._transaction()
                else:
                    self._send()
        except _Stopping:
            pass
        except Exception as exc:  # a bug here must not hang the run: report it
            self.work.errors.append(f"{self.process}: {describe(exc)}")
        finally:
            self._close()

    def _open(self) -> None:
        self.process = f"producer-{self.index}" + (
            f".{self.incarnation}" if self.incarnation else ""
        )
        config = self.work.config("producer")
        if self.transactional:
            config["transactional.id"] = f"{self.work.topic}-{self.index}"
        self.producer = Producer(config)
        if self.transactional:
            self.producer.init_transactions(self.work.api_timeout_s * 3)

    def _close(self) -> None:
        if self.producer is not None:
            with contextlib.suppress(Exception):
                self.producer.flush(0)
            self.producer = None

    def _reopen(self) -> None:
        self._close()
        self.incarnation += 1
        while not self.work.stop.is_set():
            try:
                self._open()
                return
            except KafkaException:  # init_transactions while the cluster is down: try again
                time.sleep(0.5)
        raise _Stopping

    def _send(self, txn: int | None = None) -> OpType:
        assert self.producer is not None
        work = self.work
        value, partition = work.values.next(), self.rng.randrange(work.partitions)
        invocation = work.recorder.invoke(self.process, F.SEND, Send(partition, value, txn=txn))
        reports: list[tuple[KafkaError | None, Message]] = []
        try:
            self.producer.produce(
                work.topic,
                value=str(value).encode(),
                partition=partition,
                on_delivery=lambda error, message: reports.append((error, message)),
            )
        except (KafkaException, BufferError) as exc:  # never queued: never written
            work.recorder.complete(invocation, OpType.FAIL, error=describe(exc))
            return OpType.FAIL
        deadline = time.monotonic() + work.delivery_wait_s
        while not reports and time.monotonic() < deadline:
            self.producer.poll(0.05)
        if not reports:
            work.recorder.complete(invocation, OpType.INFO, error="no delivery report")
            self._reopen()
            return OpType.INFO
        error, message = reports[0]
        if error is None:
            offset = message.offset()
            done = Send(partition, value, offset if offset >= 0 else None, txn)
            work.recorder.complete(invocation, OpType.OK, done)
            return OpType.OK
        refused = error.code() in REFUSED_UNWRITTEN
        outcome = OpType.FAIL if refused else OpType.INFO
        work.recorder.complete(invocation, outcome, error=describe(error))
        if error.fatal():
            self._reopen()
        return outcome

    def _transaction(self) -> None:
        assert self.producer is not None
        work = self.work
        txn = work.txn_ids.next()
        begin = work.recorder.invoke(self.process, F.TXN_BEGIN, Txn(txn))
        try:
            self.producer.begin_transaction()
        except KafkaException as exc:
            work.recorder.complete(begin, OpType.FAIL, error=describe(exc))
            self._reopen()
            return
        work.recorder.complete(begin, OpType.OK)
        all_ok = True
        for _ in range(self.rng.randint(*TXN_SENDS)):
            process = self.process
            outcome = self._send(txn)
            if process != self.process:  # the client was replaced: the transaction is gone
                return
            if outcome is not OpType.OK:
                all_ok = False
                break
        if all_ok and self.rng.random() >= TXN_ABORT_RATIO:
            self._commit(txn)
        else:
            self._abort(txn)

    def _commit(self, txn: int) -> None:
        """Commit; after an indeterminate try only a commit may follow, never an abort (which
        would claim an outcome the coordinator may already have decided otherwise)."""
        assert self.producer is not None
        work = self.work
        for _ in range(COMMIT_TRIES):
            invocation = work.recorder.invoke(self.process, F.TXN_COMMIT, Txn(txn))
            try:
                self.producer.commit_transaction(work.api_timeout_s)
            except KafkaException as exc:
                error = error_of(exc)
                if error is not None and error.txn_requires_abort():
                    work.recorder.complete(invocation, OpType.FAIL, error=describe(exc))
                    self._abort(txn)
                    return
                work.recorder.complete(invocation, OpType.INFO, error=describe(exc))
                if error is None or error.fatal() or not error.retriable():
                    break
                continue
            work.recorder.complete(invocation, OpType.OK)
            return
        self._reopen()  # the outcome stays unknown; the new client fences this one

    def _abort(self, txn: int) -> None:
        assert self.producer is not None
        invocation = self.work.recorder.invoke(self.process, F.TXN_ABORT, Txn(txn))
        try:
            self.producer.abort_transaction(self.work.api_timeout_s)
        except KafkaException as exc:
            self.work.recorder.complete(invocation, OpType.INFO, error=describe(exc))
            self._reopen()
            return
        self.work.recorder.complete(invocation, OpType.OK)


class ConsumerWorker(threading.Thread):
    def __init__(self, work: Workload, index: int, group: str) -> None:
        super().__init__(name=f"verify-consumer-{index}", daemon=True)
        self.work, self.index, self.group = work, index, group
        self.process = f"consumer-{index}"
        self.rebalances = 0  # assign, revoke and lost callbacks seen: changes on every rebalance
        self.assigned: frozenset[int] = frozenset()  # as of the last callback
        self.consumer: Consumer | None = None

    def run(self) -> None:
        config = self.work.config("consumer")
        config.update({"group.id": self.group, "enable.auto.commit": False})
        config.setdefault("auto.offset.reset", "earliest")
        self.consumer = Consumer(config)
        try:
            self.consumer.subscribe(
                [self.work.topic],
                on_assign=self._assigned,
                on_revoke=self._revoked,
                on_lost=self._revoked,
            )
            while not self.work.stop.is_set():
                reads, stable = self._poll()
                if reads and stable:
                    self._commit(reads)
        except Exception as exc:
            self.work.errors.append(f"{self.process}: {describe(exc)}")
        finally:
            with contextlib.suppress(Exception):
                self.consumer.close()  # leaves the group

    def _assigned(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        self.assigned = frozenset(tp.partition for tp in partitions)

    def _revoked(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self.rebalances += 1
        self.assigned = frozenset()  # eager rebalancing: everything goes back

    def _poll(self) -> tuple[dict[int, list[tuple[int, int]]], bool]:
        """One recorded poll: what it read, and whether no rebalance happened during it."""
        assert self.consumer is not None
        before = self.rebalances
        invocation = self.work.recorder.invoke(self.process, F.POLL, Poll())
        try:
            messages = self.consumer.consume(num_messages=POLL_BATCH, timeout=POLL_TIMEOUT_S)
        except KafkaException as exc:
            self.work.recorder.complete(invocation, OpType.INFO, error=describe(exc))
            return {}, False
        reads = read_messages(messages)
        assignment = tuple(sorted(tp.partition for tp in self.consumer.assignment()))
        poll = Poll(_frozen(reads), assignment, self.rebalances)
        self.work.recorder.complete(invocation, OpType.OK, poll)
        return reads, self.rebalances == before

    def _commit(self, reads: dict[int, list[tuple[int, int]]]) -> None:
        assert self.consumer is not None
        offsets = {p: pairs[-1][0] + 1 for p, pairs in reads.items()}
        invocation = self.work.recorder.invoke(self.process, F.COMMIT, Commit(self.group, offsets))
        positions = [TopicPartition(self.work.topic, p, o) for p, o in offsets.items()]
        try:
            answers = self.consumer.commit(offsets=positions, asynchronous=False) or []
        except KafkaException as exc:
            error = error_of(exc)
            refused = error is not None and error.code() in COMMIT_REFUSED
            outcome = OpType.FAIL if refused else OpType.INFO
            self.work.recorder.complete(invocation, outcome, error=describe(exc))
            return
        failed = [tp for tp in answers if tp.error is not None]
        if failed:  # partly refused: which part applied is unknown
            self.work.recorder.complete(invocation, OpType.INFO, error=describe(failed[0].error))
        else:
            self.work.recorder.complete(invocation, OpType.OK)


def read_messages(messages: list[Message]) -> dict[int, list[tuple[int, int]]]:
    reads: dict[int, list[tuple[int, int]]] = {}
    for message in messages:
        if message.error() is None:
            pair = (message.offset(), parse_value(message.value()))
            reads.setdefault(message.partition(), []).append(pair)
    return reads


def _frozen(reads: dict[int, list[tuple[int, int]]]) -> dict[int, tuple[tuple[int, int], ...]]:
    return {p: tuple(pairs) for p, pairs in reads.items()}


def end_offsets(work: Workload) -> dict[int, int] | None:
    """Each partition's high watermark, recorded as an end-offsets op by "admin"."""
    invocation = work.recorder.invoke("admin", F.END_OFFSETS, EndOffsets())
    consumer = Consumer({**work.config("admin"), "group.id": f"{work.topic}-admin"})
    try:
        ends = {}
        for p in range(work.partitions):
            tp = TopicPartition(work.topic, p)
            ends[p] = consumer.get_watermark_offsets(tp, timeout=work.api_timeout_s)[1]
    except KafkaException as exc:
        work.recorder.complete(invocation, OpType.INFO, error=describe(exc))
        return None
    finally:
        with contextlib.suppress(Exception):
            consumer.close()
    work.recorder.complete(invocation, OpType.OK, EndOffsets(ends))
    return ends


def drain(work: Workload, ends: dict[int, int] | None, timeout_s: float) -> bool:
    """Read every partition from its start until `ends` (or, without them, until nothing new
    comes for a few seconds); recorded as process "drain". True when it reached the ends."""
    config = work.config("consumer")
    config.update({"group.id": f"{work.topic}-drain", "enable.auto.commit": False})
    consumer = Consumer(config)
    everything = range(work.partitions)
    try:
        seek = work.recorder.invoke("drain", F.SEEK, Seek(dict.fromkeys(everything, 0)))
        consumer.assign([TopicPartition(work.topic, p, OFFSET_BEGINNING) for p in everything])
        work.recorder.complete(seek, OpType.OK)
        deadline = time.monotonic() + timeout_s
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            invocation = work.recorder.invoke("drain", F.POLL, Poll())
            messages = consumer.consume(num_messages=POLL_BATCH * 5, timeout=POLL_TIMEOUT_S)
            reads = read_messages(messages)
            poll = Poll(_frozen(reads), tuple(everything))
            work.recorder.complete(invocation, OpType.OK, poll)
            if reads:
                quiet_since = time.monotonic()
            if ends is not None and _reached(consumer, work.topic, ends):
                return True
            if ends is None and time.monotonic() - quiet_since > 3.0:
                return False
        return False
    finally:
        with contextlib.suppress(Exception):
            consumer.close()


def _reached(consumer: Consumer, topic: str, ends: dict[int, int]) -> bool:
    positions = consumer.position([TopicPartition(topic, p) for p in ends])
    return all(tp.offset >= ends[tp.partition] or ends[tp.partition] == 0 for tp in positions)
