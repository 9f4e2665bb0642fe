"""The root's options given after a command are moved before it, unless the command has an
option of that name itself."""

from __future__ import annotations

import pytest
import typer

from rlog.cli.app import app, hoist_global_options

ROOT = typer.main.get_command(app)


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        ("consume T --timeout 5", "--timeout 5 consume T"),
        ("consume T --timeout=5 -e", "--timeout=5 consume T -e"),
        ("topic describe T -v --color never", "-v --color never topic describe T"),
        ("--timeout 3 consume T --offset -5 -v", "-v --timeout 3 consume T --offset -5"),
        # commands with their own option of that name keep it
        ("bench consume --topic T --messages 5 --timeout 1000", None),
        ("topic list --bootstrap h:1 --data-dir D", None),
        # after --, everything is an argument
        ("consume -- --timeout", None),
        # unknown commands are left for click to refuse
        ("nosuch --timeout 5", None),
    ],
)
def test_hoisting(given: str, parsed: str | None) -> None:
    assert hoist_global_options(ROOT, given.split()) == (parsed or given).split()
