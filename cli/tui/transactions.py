"""Transactions for the dashboard, asked as ``rlog txn list`` and ``rlog txn describe`` ask
(:mod:`rlog.cli.txn`): ListTransactions at every broker, then one DescribeTransactions per
coordinator for the ids it listed. The coordinator is already known from the listing, so no
FindCoordinator round is needed; an id whose description is missing (its coordinator stopped
answering or moved between the two requests) is still shown from its listing.

Everything here blocks, bounded by the timeout: a broker that does not answer costs one
timeout and is then skipped for the rest of the refresh; its transactions are missing and a
warning says so.
"""

from __future__ import annotations

import ssl
import time
from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from rlog.cli import replicas, txn
from rlog.cli.tui.snapshot import TransactionInfo
from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.errors import ErrorCode

DESCRIBE_VERSION = 0


@dataclass(frozen=True)
class Transactions:
    """One refresh's transactions, the warnings about brokers that did not answer, and the
    wall time (ms) they were asked for."""

    found: tuple[TransactionInfo, ...] = ()
    warnings: tuple[str, ...] = ()
    at_ms: int | None = None  # None: not asked (the source failed)


def transaction_info(listing: txn.Listing, description: txn.Description | None) -> TransactionInfo:
    """What the dashboard shows of one id: its description when there is one (it is the
    newer answer), else what its listing says."""
    if description is None:
        return TransactionInfo(
            listing.transactional_id, listing.coordinator, listing.producer_id, listing.state
        )
    return TransactionInfo(
        transactional_id=listing.transactional_id,
        coordinator=description.coordinator,
        producer_id=description.producer_id,
        state=description.state,
        producer_epoch=description.producer_epoch,
        timeout_ms=description.timeout_ms,
        start_time_ms=description.start_time_ms,
        partitions=description.partitions,
    )


def combine(
    listings: Iterable[txn.Listing], descriptions: Mapping[str, txn.Description]
) -> tuple[TransactionInfo, ...]:
    """The listings (sorted by id, as ``rlog txn list``) with their descriptions."""
    return tuple(
        transaction_info(listing, descriptions.get(listing.transactional_id))
        for listing in sorted(listings, key=lambda listing: listing.transactional_id)
    )


def describe_at_coordinators(
    cluster: replicas.WireCluster, listings: Iterable[txn.Listing]
) -> tuple[dict[str, txn.Description], list[str]]:
    """One DescribeTransactions per coordinator for the ids it listed: the descriptions by
    id, and a warning per coordinator that did not answer."""
    by_coordinator: dict[int, list[str]] = defaultdict(list)
    for listing in listings:
        by_coordinator[listing.coordinator].append(listing.transactional_id)
    found: dict[str, txn.Description] = {}
    warnings: list[str] = []
    for node, ids in sorted(by_coordinator.items()):
        body = cluster.request_at(
            node, ApiKey.DESCRIBE_TRANSACTIONS, DESCRIBE_VERSION, {"transactional_ids": ids}
        )
        if body is None:
            warnings.append(f"broker {node} did not answer DescribeTransactions")
            continue
        for entry in body.get("transaction_states") or []:
            if entry["error_code"] == ErrorCode.NONE:
                description = txn.description_of(node, entry)
                found[description.transactional_id] = description
    return found, warnings


def fetch_transactions(
    bootstrap: str,
    timeout_s: float,
    avoid: Collection[tuple[str, int]] = (),
    tls: ssl.SSLContext | None = None,
) -> Transactions:
    """Every transactional id the brokers' coordinators own, described, not asking the brokers
    at `avoid` (not running). Raises :class:`rlog.cli.terminal.CliError` when no broker answers
    at all."""
    cluster = replicas.WireCluster(bootstrap, timeout_s, tls)
    cluster.avoid = set(avoid)
    try:
        listings, warnings = txn.list_transactions(cluster, [], timeout_s)
        descriptions, more = describe_at_coordinators(cluster, listings)
    finally:
        cluster.close()
    return Transactions(
        combine(listings, descriptions), (*warnings, *more), int(time.time() * 1000)
    )
