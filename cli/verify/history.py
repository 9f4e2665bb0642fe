"""The history of a verify run: Jepsen-style operations, and their JSON lines form.

A history is a list of `Op`s in the order they happened. Each worker (a producer or a consumer,
named by `process`) does one thing at a time: it records an ``invoke`` op, then one completion
with the same `f`: ``ok`` (it happened), ``fail`` (it certainly did not happen) or ``info``
(indeterminate: a timeout, a lost answer; it may or may not have happened, now or later). A
worker whose client is rebuilt after a crash takes a new `process` name, because what the old
client knew (its positions, its transaction) is gone. `index` is the op's place in the history
(strictly increasing); `time_ns` is a monotonic clock reading, for people.

What each `f` carries in `value` (the invoke carries the request, the completion the result):

- ``send`` `Send`: the partition and the value, unique in the run; an ``ok`` completion carries
  the offset the broker gave, and `txn` names the transaction the send belongs to, if any.
- ``poll`` `Poll`: on ``ok``, what was read per partition, as (offset, value) in the order
  returned, with the consumer's assignment and generation when the poll returned.
- ``commit`` `Commit`: a consumer group's committed offsets (the next offset to read) per
  partition; `reset` marks a deliberate move (an operator's reset, a commit after a seek back).
- ``seek`` `Seek`: a consumer moved its positions on purpose.
- ``txn-begin``, ``txn-commit``, ``txn-abort`` `Txn`: a transactional producer's transaction,
  whose sends carry its id.
- ``end-offsets`` `EndOffsets`: on ``ok``, each partition's high watermark, read after the
  faults were healed (ListOffsets latest, read_uncommitted).

One line of the JSON lines form is one op, e.g.::

    {"index":7,"time_ns":10500,"process":"producer-1","type":"ok","f":"send","value":{"partition":0,"value":12,"offset":5}}
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

JsonObject = dict[str, object]


class HistoryError(ValueError):
    """A history that cannot be judged: malformed JSON, or ops that contradict the format."""


class OpType(StrEnum):
    INVOKE = "invoke"
    OK = "ok"
    FAIL = "fail"
    INFO = "info"


class F(StrEnum):
    SEND = "send"
    POLL = "poll"
    COMMIT = "commit"
    SEEK = "seek"
    TXN_BEGIN = "txn-begin"
    TXN_COMMIT = "txn-commit"
    TXN_ABORT = "txn-abort"
    END_OFFSETS = "end-offsets"


@dataclass(frozen=True)
class Send:
    partition: int
    value: int
    offset: int | None = None  # the broker's answer, on ok only
    txn: int | None = None

    def to_json(self) -> JsonObject:
        obj: JsonObject = {"partition": self.partition, "value": self.value}
        if self.offset is not None:
            obj["offset"] = self.offset
        if self.txn is not None:
            obj["txn"] = self.txn
        return obj

    @classmethod
    def from_json(cls, obj: JsonObject) -> Send:
        return cls(
            partition=_int(obj, "partition"),
            value=_int(obj, "value"),
            offset=_opt_int(obj, "offset"),
            txn=_opt_int(obj, "txn"),
        )


@dataclass(frozen=True)
class Poll:
    # partition -> ((offset, value), ...) in the order the consumer returned them
    reads: Mapping[int, tuple[tuple[int, int], ...]] = field(default_factory=dict)
    assignment: tuple[int, ...] = ()
    # Anything that changes on every rebalance the consumer goes through: the group's
    # generation id, or a count of its assign/revoke/lost callbacks. None: manual assignment.
    generation: int | None = None

    def to_json(self) -> JsonObject:
        obj: JsonObject = {
            "reads": {str(p): [[o, v] for o, v in pairs] for p, pairs in self.reads.items()},
            "assignment": list(self.assignment),
        }
        if self.generation is not None:
            obj["generation"] = self.generation
        return obj

    @classmethod
    def from_json(cls, obj: JsonObject) -> Poll:
        raw = obj.get("reads", {})
        if not isinstance(raw, dict):
            raise HistoryError(f"reads must be an object, not {raw!r}")
        reads = {_partition(p): _pairs(pairs) for p, pairs in raw.items()}
        assignment = obj.get("assignment", [])
        if not isinstance(assignment, list):
            raise HistoryError(f"assignment must be a list, not {assignment!r}")
        return cls(
            reads=reads,
            assignment=tuple(_checked_int(p, "assignment") for p in assignment),
            generation=_opt_int(obj, "generation"),
        )


@dataclass(frozen=True)
class Commit:
    group: str
    offsets: Mapping[int, int]  # partition -> the next offset the group will read
    reset: bool = False

    def to_json(self) -> JsonObject:
        obj: JsonObject = {"group": self.group, "offsets": _offsets_json(self.offsets)}
        if self.reset:
            obj["reset"] = True
        return obj

    @classmethod
    def from_json(cls, obj: JsonObject) -> Commit:
        group = obj.get("group")
        if not isinstance(group, str):
            raise HistoryError(f"group must be a string, not {group!r}")
        reset = obj.get("reset", False)
        if not isinstance(reset, bool):
            raise HistoryError(f"reset must be true or false, not {reset!r}")
        return cls(group=group, offsets=_offsets(obj, "offsets"), reset=reset)


@dataclass(frozen=True)
class Seek:
    positions: Mapping[int, int]  # partition -> the next offset the consumer will read

    def to_json(self) -> JsonObject:
        return {"positions": _offsets_json(self.positions)}

    @classmethod
    def from_json(cls, obj: JsonObject) -> Seek:
        return cls(positions=_offsets(obj, "positions"))


@dataclass(frozen=True)
class Txn:
    txn: int

    def to_json(self) -> JsonObject:
        return {"txn": self.txn}

    @classmethod
    def from_json(cls, obj: JsonObject) -> Txn:
        return cls(txn=_int(obj, "txn"))


@dataclass(frozen=True)
class EndOffsets:
    offsets: Mapping[int, int] = field(default_factory=dict)  # partition -> high watermark

    def to_json(self) -> JsonObject:
        return {"offsets": _offsets_json(self.offsets)}

    @classmethod
    def from_json(cls, obj: JsonObject) -> EndOffsets:
        return cls(offsets=_offsets(obj, "offsets"))


Value = Send | Poll | Commit | Seek | Txn | EndOffsets

VALUE_OF: dict[F, type[Value]] = {
    F.SEND: Send,
    F.POLL: Poll,
    F.COMMIT: Commit,
    F.SEEK: Seek,
    F.TXN_BEGIN: Txn,
    F.TXN_COMMIT: Txn,
    F.TXN_ABORT: Txn,
    F.END_OFFSETS: EndOffsets,
}


@dataclass(frozen=True)
class Op:
    index: int
    time_ns: int
    process: str
    type: OpType
    f: F
    value: Value
    error: str | None = None  # why a fail or info, for people

    def __post_init__(self) -> None:
        if not isinstance(self.type, OpType) or not isinstance(self.f, F):
            raise HistoryError(f"op {self.index}: type and f must be OpType and F")
        if not isinstance(self.value, VALUE_OF[self.f]):
            raise HistoryError(
                f"op {self.index}: a {self.f} op carries a {VALUE_OF[self.f].__name__}, "
                f"not {type(self.value).__name__}"
            )

    def to_json(self) -> JsonObject:
        obj: JsonObject = {
            "index": self.index,
            "time_ns": self.time_ns,
            "process": self.process,
            "type": str(self.type),
            "f": str(self.f),
            "value": self.value.to_json(),
        }
        if self.error is not None:
            obj["error"] = self.error
        return obj

    @classmethod
    def from_json(cls, obj: object) -> Op:
        if not isinstance(obj, dict):
            raise HistoryError(f"an op must be a JSON object, not {obj!r}")
        process, error, value = obj.get("process"), obj.get("error"), obj.get("value")
        if not isinstance(process, str):
            raise HistoryError(f"process must be a string, not {process!r}")
        if error is not None and not isinstance(error, str):
            raise HistoryError(f"error must be a string, not {error!r}")
        if not isinstance(value, dict):
            raise HistoryError(f"value must be an object, not {value!r}")
        try:
            op_type, f = OpType(obj.get("type")), F(obj.get("f"))
        except ValueError as e:
            raise HistoryError(str(e)) from None
        return cls(
            index=_int(obj, "index"),
            time_ns=_int(obj, "time_ns"),
            process=process,
            type=op_type,
            f=f,
            value=VALUE_OF[f].from_json(value),
            error=error,
        )


def write_jsonl(path: Path | str, ops: Iterable[Op]) -> None:
    """Write one JSON object per line, in history order."""
    with open(path, "w", encoding="utf-8") as out:
        for op in ops:
            out.write(json.dumps(op.to_json(), separators=(",", ":")) + "\n")


def read_jsonl(path: Path | str) -> list[Op]:
    """Read what `write_jsonl` wrote; a bad line raises HistoryError naming it."""
    ops: list[Op] = []
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                ops.append(Op.from_json(json.loads(line)))
            except (json.JSONDecodeError, HistoryError) as e:
                raise HistoryError(f"{path}:{number}: {e}") from None
    return ops


def _checked_int(value: object, what: str) -> int:
    # bool is an int in Python, never in a history
    if not isinstance(value, int) or isinstance(value, bool):
        raise HistoryError(f"{what} must be an integer, not {value!r}")
    return value


def _int(obj: JsonObject, key: str) -> int:
    return _checked_int(obj.get(key), key)


def _opt_int(obj: JsonObject, key: str) -> int | None:
    value = obj.get(key)
    return None if value is None else _checked_int(value, key)


def _partition(key: str) -> int:
    try:
        return int(key)
    except ValueError:
        raise HistoryError(f"partition keys must be integers, not {key!r}") from None


def _pairs(raw: object) -> tuple[tuple[int, int], ...]:
    if not isinstance(raw, list):
        raise HistoryError(f"reads of a partition must be a list, not {raw!r}")
    pairs: list[tuple[int, int]] = []
    for pair in raw:
        if not isinstance(pair, list) or len(pair) != 2:
            raise HistoryError(f"a read must be [offset, value], not {pair!r}")
        pairs.append((_checked_int(pair[0], "offset"), _checked_int(pair[1], "value")))
    return tuple(pairs)


def _offsets(obj: JsonObject, key: str) -> dict[int, int]:
    raw = obj.get(key, {})
    if not isinstance(raw, dict):
        raise HistoryError(f"{key} must be an object, not {raw!r}")
    return {_partition(p): _checked_int(o, key) for p, o in raw.items()}


def _offsets_json(offsets: Mapping[int, int]) -> dict[str, int]:
    return {str(p): o for p, o in offsets.items()}
