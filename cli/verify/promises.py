"""What a run's settings promise, as the guarantees each anomaly example breaks.

A detector says, for each example it finds, which guarantee it breaks (`Guarantee`); the run's
`Promises` say which guarantees its settings give. An example is a violation when its guarantee
is promised, and an anomaly the settings allow otherwise (an acks=1 run that loses a write under
a leader kill is reported, and allowed).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Guarantee(StrEnum):
    # The client's own record: a send that definitely failed is never read, no value appears
    # that nobody sent. No setting can excuse these.
    ALWAYS = "always"
    # unclean.leader.election.enable=false: what consumers read below the high watermark is
    # never rewritten, so reads agree and consumer positions and group offsets never move back.
    CLEAN_ELECTION = "clean elections"
    # acks=all with min.insync.replicas >= 2: an acknowledged write is never lost or moved.
    DURABLE_ACKS = "durable acks"
    # enable.idempotence (a transactional.id implies it): a retry is never written twice.
    IDEMPOTENCE = "idempotence"
    # isolation.level=read_committed consumers: records of aborted transactions are never read.
    READ_COMMITTED = "read_committed"


@dataclass(frozen=True)
class Promises:
    """The run's settings; every guarantee but ALWAYS also needs clean elections."""

    durable_acks: bool = False
    idempotence: bool = False
    read_committed: bool = False  # also tells the checker the consumers skip aborted records
    clean_election: bool = True

    @classmethod
    def from_settings(
        cls,
        *,
        acks: str | int,
        min_insync_replicas: int,
        idempotence: bool = False,
        transactional: bool = False,
        isolation: str = "read_uncommitted",
        unclean_leader_election: bool = False,
    ) -> Promises:
        """Promises from client and topic settings as Kafka spells them."""
        acks_text = str(acks)
        if acks_text not in ("all", "-1", "1", "0"):
            raise ValueError(f"acks must be all, -1, 1 or 0, not {acks!r}")
        if isolation not in ("read_committed", "read_uncommitted"):
            raise ValueError(f"isolation must be read_committed or read_uncommitted: {isolation!r}")
        return cls(
            durable_acks=acks_text in ("all", "-1") and min_insync_replicas >= 2,
            idempotence=idempotence or transactional,
            read_committed=isolation == "read_committed",
            clean_election=not unclean_leader_election,
        )

    def holds(self, guarantee: Guarantee) -> bool:
        if guarantee is Guarantee.ALWAYS:
            return True
        if not self.clean_election:
            return False  # an unclean election can rewrite the log under anything else
        return {
            Guarantee.CLEAN_ELECTION: True,
            Guarantee.DURABLE_ACKS: self.durable_acks,
            Guarantee.IDEMPOTENCE: self.idempotence,
            Guarantee.READ_COMMITTED: self.read_committed,
        }[guarantee]

    def describe(self) -> str:
        """The promised guarantees, for the verdict's header."""
        held = [str(g) for g in Guarantee if g is not Guarantee.ALWAYS and self.holds(g)]
        return ", ".join(held) if held else "nothing beyond the client's own record"
