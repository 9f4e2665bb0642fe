"""rlogd's chaos rules (daemon/chaos.py) and the faults file they write (daemon/faults_file.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

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
