"""Record a history as the workload runs: one lock, one index, one clock for every worker.

Each worker thread calls `invoke` before it asks the cluster anything and `complete` when the
answer (or its absence) is known, so the order of indices is the real-time order the checker
needs: an op invoked after another completed has a higher index than that completion.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from rlog.cli.verify.history import F, Op, OpType, Value


@dataclass(frozen=True)
class Invocation:
    """What `invoke` hands back, to complete that op later."""

    process: str
    f: F
    value: Value


class Recorder:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ops: list[Op] = []
        self._started_ns = time.monotonic_ns()

    def invoke(self, process: str, f: F, value: Value) -> Invocation:
        self._append(process, OpType.INVOKE, f, value, None)
        return Invocation(process, f, value)

    def complete(
        self,
        invocation: Invocation,
        op_type: OpType,
        value: Value | None = None,
        error: str | None = None,
    ) -> None:
        """`value` defaults to the request: what a fail or info completion carries."""
        result = invocation.value if value is None else value
        self._append(invocation.process, op_type, invocation.f, result, error)

    def ops(self) -> list[Op]:
        with self._lock:
            return list(self._ops)

    def __len__(self) -> int:
        with self._lock:
            return len(self._ops)

    def _append(self, process: str, op_type: OpType, f: F, value: Value, error: str | None) -> None:
        with self._lock:
            index = len(self._ops)
            now = time.monotonic_ns() - self._started_ns
            self._ops.append(Op(index, now, process, op_type, f, value, error))
