"""``rlog verify``'s nemesis bookkeeping, against a stand-in for rlogd's control socket that
answers as rlogd does (ok, or a refusal with its reason): the faults it reports are the ones
made, and `heal` resumes what it paused."""

from __future__ import annotations

from typing import Any

from rlog.cli.verify.scenarios import Nemesis


class Rlogd:
    """Answers control requests; `down` names processes that are restarting (refused)."""

    def __init__(self, down: frozenset[str] = frozenset()) -> None:
        self.down = set(down)
        self.requests: list[dict[str, Any]] = []

    def apply(self, request: dict[str, Any]) -> dict[str, Any]:
        self.requests.append(request)
        target = request.get("target", "")
        if target in self.down:
            return {"ok": False, "error": f"{target} is not running (state restarting)"}
        return {"ok": True, "message": "done"}


def nemesis(scenario: str, rlogd: Rlogd) -> Nemesis:
    return Nemesis(
        scenario=scenario,
        seed=1,
        apply=rlogd.apply,
        leader_of=lambda partition: 2,
        partitions=3,
        brokers=["broker-1", "broker-2", "broker-3"],
        session_timeout_s=0.0,
        report=lambda line: None,
    )


def test_a_refused_kill_is_not_counted_as_a_fault() -> None:
    rlogd = Rlogd(down=frozenset({"controller"}))
    chaos = nemesis("kill-controller", rlogd)
    chaos._request({"op": "kill", "target": "controller"})
    assert chaos.faults == 0
    rlogd.down.clear()
    chaos._request({"op": "kill", "target": "controller"})
    assert chaos.faults == 1 and len(rlogd.requests) == 2


def test_heal_resumes_what_was_paused_and_is_no_fault() -> None:
    rlogd = Rlogd()
    chaos = nemesis("pause-leader", rlogd)
    chaos._request({"op": "pause", "target": "broker-2"})
    chaos.heal()
    assert chaos.faults == 1 and not chaos.paused
    assert rlogd.requests[-2:] == [{"op": "heal"}, {"op": "resume", "target": "broker-2"}]


def test_a_refused_pause_is_not_resumed_at_heal() -> None:
    rlogd = Rlogd(down=frozenset({"broker-2"}))
    chaos = nemesis("pause-leader", rlogd)
    chaos._request({"op": "pause", "target": "broker-2"})
    chaos.heal()
    assert chaos.faults == 0
    assert rlogd.requests[-1] == {"op": "heal"}
