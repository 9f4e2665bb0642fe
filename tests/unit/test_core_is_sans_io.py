"""core/ holds no sockets, event loops, clocks, threads or randomness, and never reaches up.

This is what lets a seeded simulator drive the same code the brokers run
(ARCHITECTURE.md, "The core contract").
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[2] / "core"
FORBIDDEN = {
    "asyncio", "socket", "selectors", "threading", "multiprocessing", "subprocess",
    "time", "random", "uvloop", "signal",
}  # fmt: skip
FORBIDDEN_PACKAGES = ("rlog.daemon", "rlog.cli", "rlog.spark")


def imported_modules(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


@pytest.mark.parametrize("path", sorted(CORE.rglob("*.py")), ids=lambda p: str(p.relative_to(CORE)))
def test_core_module_imports_no_io_clock_or_upper_layer(path: Path) -> None:
    for name in imported_modules(path):
        assert name.split(".")[0] not in FORBIDDEN, f"{path.name} imports {name}"
        assert not name.startswith(FORBIDDEN_PACKAGES), f"{path.name} imports {name}"


def test_the_check_sees_a_forbidden_import(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("def f():\n    import time\n    from rlog.daemon import config\n")
    assert imported_modules(sneaky) == ["time", "rlog.daemon"]
