"""pyproject.toml lists every package, so `pip install .` (not only -e) ships all of rlog."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("core", "daemon", "cli", "spark")


def test_every_package_directory_is_listed_in_pyproject() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    on_disk = {"rlog"}
    for layer in LAYERS:
        for init in (ROOT / layer).rglob("__init__.py"):
            relative = init.parent.relative_to(ROOT)
            on_disk.add(".".join(("rlog", *relative.parts)))
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages"
    assert listed - on_disk == set(), "these listed packages do not exist"
