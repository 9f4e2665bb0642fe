"""Network and disk chaos requests (partition, heal, delay, disk, lose-answers): new rules into
the brokers' faults files, and SIGUSR1 to each broker whose rules changed so it rereads its
file. The answer waits until each of those brokers has acknowledged the new rules (its
faults.applied.json, see daemon/broker/faults.py): whatever a client sends after it meets them."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

from rlog.daemon.chaos import ChaosError, ChaosRules
from rlog.daemon.control import ControlError
from rlog.daemon.data_dir import faults_applied_path
from rlog.daemon.faults_file import FaultRules, FaultsFileError
from rlog.daemon.rlogd.cluster import Cluster

# A running broker rereads its rules within milliseconds; one still loading its logs reads them
# when it starts serving, which may take longer than a chaos request should wait.
CONFIRM_TIMEOUT_S = 5.0
CONFIRM_POLL_S = 0.005


class ChaosControl:
    """Keeps the cluster's chaos rules; answers the control socket's chaos ops."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.rules = ChaosRules({broker.name: broker.data_dir for broker in cluster.brokers})

    def heal_all(self) -> None:
        """Every broker's file without faults: a new rlogd starts with every link healed."""
        self.rules.write_all()

    async def apply(self, op: str, request: dict[str, Any]) -> dict[str, Any]:
        """partition / heal / delay / disk / lose-answers (see rlog.daemon.chaos): new rules to
        the brokers."""
        if self.cluster.stopping:
            raise ControlError("rlogd is shutting down")
        try:
            changed, message = self._change(op, request)
        except ChaosError as error:
            reason = "unknown-target" if str(error).startswith("unknown process") else "bad-request"
            raise ControlError(str(error), reason) from None
        for name in changed:
            self.rules.write(name)
            child = self.cluster.process(name)
            if child.alive and child.process is not None:
                child.process.send_signal(signal.SIGUSR1)  # reread the faults file
        unconfirmed = await self.await_in_force(changed)
        message += not_in_force(unconfirmed)
        faults = self.rules.summary()
        self.cluster.journal.record(
            "chaos", message, op=op, changed=changed, faults=faults, unconfirmed=unconfirmed
        )
        return {
            "op": op,
            "message": message,
            "changed": changed,
            "faults": faults,
            "unconfirmed": unconfirmed,
        }

    async def await_in_force(self, names: list[str]) -> dict[str, str]:
        """Wait until every running broker in `names` has put its new rules in force; those
        that have not, each with why. A stopped broker reads them when it starts, so it is not
        waited for; a paused one reads them when resumed; the controller has no rules."""
        unconfirmed: dict[str, str] = {}
        waiting: list[str] = []
        for name in (n for n in names if n in self.rules.faults):
            child = self.cluster.process(name)
            if child.state == "paused":
                unconfirmed[name] = "paused: when resumed"
            elif child.alive:
                waiting.append(name)
        deadline = time.monotonic() + CONFIRM_TIMEOUT_S
        while True:
            waiting = [n for n in waiting if self._still_to_confirm(n)]
            if not waiting or time.monotonic() >= deadline:
                break
            await asyncio.sleep(CONFIRM_POLL_S)
        for name in waiting:
            unconfirmed[name] = f"no acknowledgement within {CONFIRM_TIMEOUT_S:.0f} s"
        return unconfirmed

    def _still_to_confirm(self, name: str) -> bool:
        """The broker runs and has not acknowledged the rules rlogd last wrote for it."""
        if not self.cluster.process(name).alive:
            return False
        applied = faults_applied_path(self.rules.faults_path(name))
        try:
            return FaultRules.read(applied) != self.rules.faults[name]
        except FaultsFileError:
            return True

    def _change(self, op: str, request: dict[str, Any]) -> tuple[list[str], str]:
        """The rules `request` asks for: the brokers whose rules changed, and what was done."""
        rules = self.rules
        if op == "partition":
            names = request.get("targets")
            if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
                raise ChaosError("partition needs 'targets': a list of process names")
            clients = bool(request.get("clients", False))
            changed = rules.partition(names, clients)
            message = "cut the links between " + ", ".join(names)
            if clients:
                message += f", and clients off {names[0]}"
            return changed, message
        if op == "heal":
            return rules.heal(), "healed every link, delay and disk, and disarmed lost answers"
        if op == "delay":
            target, delay_ms = request.get("target"), request.get("ms")
            if not isinstance(target, str) or not isinstance(delay_ms, int):
                raise ChaosError("delay needs 'target' (broker-N) and 'ms' (an integer)")
            changed = rules.delay(target, delay_ms)
            return changed, f"{target}: every request in and out waits {delay_ms} ms"
        if op == "lose-answers":
            return self._lose_answers(request)
        target, state = request.get("target"), request.get("state")
        if not isinstance(target, str) or not isinstance(state, str):
            raise ChaosError("disk needs 'target' (broker-N) and 'state' (stall|full|ok)")
        return rules.disk(target, state), f"{target}: disk {state}"

    def _lose_answers(self, request: dict[str, Any]) -> tuple[list[str], str]:
        target, count = request.get("target"), request.get("count")
        # bool is an int to Python, but `true` is no count.
        if not isinstance(target, str) or not isinstance(count, int) or isinstance(count, bool):
            raise ChaosError("lose-answers needs 'target' (broker-N) and 'count' (an integer)")
        changed = self.rules.lose_answers(target, count)
        if not count:
            return changed, f"{target}: answers every Produce again"
        if count == 1:
            return changed, (
                f"{target}: the next answer to a client's Produce is lost after the append "
                "(the connection closes)"
            )
        return changed, (
            f"{target}: the next {count} answers to clients' Produce requests are lost after "
            "the append (each closes its connection)"
        )


def not_in_force(unconfirmed: dict[str, str]) -> str:
    """What an answer adds for the brokers whose rules are not in force yet ("" for none)."""
    if not unconfirmed:
        return ""
    return "; not yet in force on " + ", ".join(f"{n} ({why})" for n, why in unconfirmed.items())
