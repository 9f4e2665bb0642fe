"""rlogd's chaos rules (daemon/chaos.py), the faults file they write (daemon/faults_file.py),
and how a broker reads it (daemon/broker/faults.py) and loses answers (daemon/broker/server.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rlog.core.protocol.apis import ApiKey
from rlog.core.protocol.connection import Request
from rlog.daemon.broker.faults import Faults
from rlog.daemon.broker.server import BrokerServer
from rlog.daemon.chaos import ChaosError, ChaosRules
from rlog.daemon.faults_file import FaultRules, FaultsFileError


def rules_for(tmp_path: Path) -> ChaosRules:
    return ChaosRules({f"broker-{i}": tmp_path / f"broker-{i}" for i in (1, 2, 3)})


def test_a_refused_partition_records_no_cut(tmp_path: Path) -> None:
    """--clients with the controller named first is refused before anything is cut: a later
    request must not write cuts of the refused one into a broker's faults file."""
    chaos = rules_for(tmp_path)
    with pytest.raises(ChaosError, match="--clients"):
        chaos.partition(["controller", "broker-1", "broker-2"], clients=True)
    assert chaos.summary() == {}
    assert chaos.delay("broker-1", 5) == ["broker-1"]
    chaos.write("broker-1")
    assert FaultRules.read(chaos.faults_path("broker-1")) == FaultRules(delay_ms=5)


def test_the_faults_file_round_trips_and_names_a_bad_field(tmp_path: Path) -> None:
    chaos = rules_for(tmp_path)
    chaos.partition(["broker-1", "broker-2", "controller"], clients=True)
    chaos.write_all()
    written = FaultRules.read(chaos.faults_path("broker-1"))
    assert written.cut == {"broker-2", "controller", "clients"}
    assert FaultRules.read(tmp_path / "nowhere.json") == FaultRules(), "no file: no faults"
    with pytest.raises(FaultsFileError, match="disk"):
        FaultRules.from_json('{"disk": "melted"}')
    with pytest.raises(FaultsFileError, match="delay_ms"):
        FaultRules.from_json('{"delay_ms": true}')


def test_lose_answers_round_trips_through_the_faults_file(tmp_path: Path) -> None:
    chaos = rules_for(tmp_path)
    assert chaos.lose_answers("broker-2", 3) == ["broker-2"]
    chaos.write("broker-2")
    written = FaultRules.read(chaos.faults_path("broker-2"))
    assert written == chaos.faults["broker-2"]
    assert written.lose_answers == 3 and not written.healthy
    assert chaos.summary() == {
        "broker-2": {
            "cut": [],
            "delay_ms": 0,
            "disk": "ok",
            "lose_answers": 3,
            "lose_answers_request": written.lose_answers_request,
        }
    }
    # Unarmed, the keys stay out, so the rules of other faults keep their old shape.
    assert FaultRules(delay_ms=5).to_dict() == {"cut": [], "delay_ms": 5, "disk": "ok"}
    assert FaultRules.from_json('{"lose_answers": 0, "lose_answers_request": 7}') == FaultRules()


def test_each_lose_answers_request_rearms_even_with_the_same_count(tmp_path: Path) -> None:
    """The broker restarts its countdown when the rule changes: a second request for the same
    count must still change it, or the second loss never happens."""
    chaos = rules_for(tmp_path)
    chaos.lose_answers("broker-1", 1)
    first = chaos.faults["broker-1"]
    assert chaos.lose_answers("broker-1", 1) == ["broker-1"]
    assert chaos.faults["broker-1"].lose_answers_request != first.lose_answers_request
    assert chaos.lose_answers("broker-1", 0) == ["broker-1"]
    assert chaos.faults["broker-1"] == FaultRules(), "count 0 disarms: a healthy broker"
    assert chaos.lose_answers("broker-1", 0) == [], "nothing armed, nothing to change"


def test_lose_answers_refuses_bad_counts_and_unknown_brokers(tmp_path: Path) -> None:
    chaos = rules_for(tmp_path)
    with pytest.raises(ChaosError, match=r"count must be within 0\.\.10000, not -1"):
        chaos.lose_answers("broker-1", -1)
    with pytest.raises(ChaosError, match="count must be within"):
        chaos.lose_answers("broker-1", 10_001)
    with pytest.raises(ChaosError, match="count must be within"):
        chaos.lose_answers("broker-1", True)
    with pytest.raises(ChaosError, match="unknown process 'broker-9'"):
        chaos.lose_answers("broker-9", 1)
    with pytest.raises(ChaosError, match="acts on a broker"):
        chaos.lose_answers("controller", 1)
    assert chaos.summary() == {}, "a refused request arms nothing"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"lose_answers": -1}', "lose_answers"),
        ('{"lose_answers": true}', "lose_answers"),
        ('{"lose_answers": "2"}', "lose_answers"),
        ('{"lose_answers": 10001}', "lose_answers"),
        ('{"lose_answers": 1, "lose_answers_request": -3}', "lose_answers_request"),
        ('{"lose_answers": 1, "lose_answers_request": 1.5}', "lose_answers_request"),
    ],
)
def test_the_faults_file_refuses_a_bad_lose_answers(text: str, field: str) -> None:
    with pytest.raises(FaultsFileError, match=f"^{field}:"):
        FaultRules.from_json(text)


def test_heal_disarms_lost_answers(tmp_path: Path) -> None:
    chaos = rules_for(tmp_path)
    chaos.lose_answers("broker-3", 2)
    chaos.delay("broker-1", 10)
    assert sorted(chaos.heal()) == ["broker-1", "broker-3"]
    assert chaos.faults["broker-3"] == FaultRules() and chaos.summary() == {}


def test_describe_says_how_many_answers_are_lost() -> None:
    assert FaultRules(lose_answers=1, lose_answers_request=1).describe() == (
        "next 1 client Produce answer lost"
    )
    assert FaultRules(delay_ms=20, lose_answers=3, lose_answers_request=4).describe() == (
        "20 ms delay; next 3 client Produce answers lost"
    )
    assert FaultRules().describe() == "no faults"


def test_the_broker_counts_down_and_rearms_only_on_a_new_request(tmp_path: Path) -> None:
    chaos = rules_for(tmp_path)
    chaos.lose_answers("broker-1", 2)
    chaos.write("broker-1")
    faults = Faults(chaos.faults_path("broker-1"))
    faults.reload()  # the broker's start: the rule in the file arms it
    assert [faults.take_lost_answer("c", n) for n in range(3)] == [True, True, False]
    chaos.partition(["broker-1", "broker-2"], clients=False)
    chaos.write("broker-1")
    faults.reload()
    assert not faults.take_lost_answer("c", 3), "another rule's change hands out no more losses"
    chaos.lose_answers("broker-1", 2)
    chaos.write("broker-1")
    faults.reload()
    assert faults.answers_to_lose == 2, "the same count asked again: two fresh losses"
    chaos.heal()
    chaos.write("broker-1")
    faults.reload()
    assert not faults.take_lost_answer("c", 4)


def _produce(client_id: str, error_codes: list[int]) -> tuple[Request, dict[str, Any]]:
    request = Request(ApiKey.PRODUCE, 9, 7, client_id, {"acks": -1}, 100)
    partitions = [{"index": i, "error_code": e} for i, e in enumerate(error_codes)]
    return request, {"responses": [{"name": "t", "partition_responses": partitions}]}


class _NoHandlers:
    def serve_now(self, request: Request, client_host: str, reply: Any) -> bool:
        raise AssertionError("no request is handled here")

    async def handle(self, request: Request) -> dict[str, Any] | None:
        raise AssertionError("no request is handled here")


def test_only_answers_to_clients_that_appended_something_are_lost() -> None:
    faults = Faults(None)
    faults.answers_to_lose = 10
    server = BrokerServer(_NoHandlers(), max_request_bytes=1 << 20, faults=faults)
    assert not server.loses_answer(*_produce("broker-2", [0])), "rlog's own are spared"
    assert not server.loses_answer(*_produce("rdkafka", [6, 6])), "nothing appended"
    assert faults.answers_to_lose == 10, "and neither uses up a loss"
    assert server.loses_answer(*_produce("rdkafka", [6, 0]))
    assert faults.answers_to_lose == 9
    metadata = Request(ApiKey.METADATA, 8, 8, "rdkafka", {}, 10)
    assert not server.loses_answer(metadata, {"responses": []})
