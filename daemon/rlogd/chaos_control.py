"""Network and disk chaos requests (partition, heal, delay, disk, lose-answers): new rules into
the brokers' faults files, and SIGUSR1 to each broker whose rules changed so it rereads its
file."""

from __future__ import annotations

import signal
from typing import Any

from rlog.daemon.chaos import ChaosError, ChaosRules
from rlog.daemon.control import ControlError
from rlog.daemon.rlogd.cluster import Cluster


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
        faults = self.rules.summary()
        self.cluster.journal.record("chaos", message, op=op, changed=changed, faults=faults)
        return {"op": op, "message": message, "changed": changed, "faults": faults}

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
