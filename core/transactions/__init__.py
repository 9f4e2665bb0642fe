"""Transactions: Kafka's transaction coordinator and the records it keeps in
`__transaction_state`.

`TxnCoordinator` (coordinator.py) is the entry point; `records.py` holds the stored format,
`metadata.py` one transactional id's state machine, `effects.py` what the coordinator asks of
its broker.
"""

from rlog.core.groups.coordinator import Caller
from rlog.core.transactions.coordinator import TxnCoordinator, transaction_partition
from rlog.core.transactions.effects import (
    AllocateProducerId,
    Append,
    Effect,
    Respond,
    TxnConfig,
    TxnEvent,
    TxnLoadSummary,
    WriteMarkers,
)
from rlog.core.transactions.metadata import TxnView
from rlog.core.transactions.records import CorruptTxnRecordError, TxnLogValue, TxnState

__all__ = [
    "AllocateProducerId",
    "Append",
    "Caller",
    "CorruptTxnRecordError",
    "Effect",
    "Respond",
    "TxnConfig",
    "TxnCoordinator",
    "TxnEvent",
    "TxnLoadSummary",
    "TxnLogValue",
    "TxnState",
    "TxnView",
    "WriteMarkers",
    "transaction_partition",
]
