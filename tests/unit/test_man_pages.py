"""The man pages under man/ match the live CLI, name all of it, and render without warnings."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from rlog.cli import manpages

MAN_DIR = Path(__file__).resolve().parents[2] / "man"


def _page(page: manpages.Page) -> str:
    return (MAN_DIR / manpages.FILE_NAMES[page]).read_text(encoding="utf-8")


def _unescaped(roff: str) -> str:
    """Roff source with the escapes the generator adds undone, for plain substring checks."""
    return roff.replace("\\-", "-").replace("\\e", "\\").replace("\\&", "")


def _command_sections(roff: str) -> dict[str, str]:
    """rlog.1's ``.SS "rlog topic create"`` subsections, by command path."""
    text = _unescaped(roff)
    commands = text.split("\n.SH COMMANDS\n", 1)[1].split("\n.SH ", 1)[0]
    sections: dict[str, str] = {}
    for chunk in commands.split('.SS "rlog ')[1:]:
        name, _, body = chunk.partition('"\n')
        sections[name] = body
    return sections


@pytest.mark.parametrize("page", list(manpages.Page), ids=str)
def test_committed_page_is_what_the_generator_makes_now(page: manpages.Page) -> None:
    name = manpages.FILE_NAMES[page]
    expected = manpages.GENERATORS[page]()
    committed = (MAN_DIR / name).read_text(encoding="utf-8") if (MAN_DIR / name).exists() else ""
    assert committed == expected, (
        f"man/{name} is out of date with the CLI; regenerate it with: {manpages.REGENERATE_COMMAND}"
    )


def test_rlog_page_names_every_command_and_option_in_its_section() -> None:
    roff = _page(manpages.Page.RLOG)
    sections = _command_sections(roff)
    docs = list(manpages.walk_commands())
    assert docs, "the command tree is empty"
    missing: list[str] = []
    for doc in docs:
        path = " ".join(doc.path)
        if path not in sections:
            missing.append(f"command 'rlog {path}'")
            continue
        for param in manpages.visible_params(doc.command, doc.ctx):
            if not manpages.is_option(param):
                if manpages.argument_metavar(param) not in sections[path]:
                    missing.append(f"argument {param.name} of 'rlog {path}'")
                continue
            if manpages.is_help_option(param, doc.ctx):
                continue
            for flag in manpages.option_flags(param):
                if not re.search(rf"\\fB{re.escape(flag)}\\fR", sections[path]):
                    missing.append(f"{flag} of 'rlog {path}'")
    assert not missing, "rlog.1 does not document: " + ", ".join(missing)


def test_rlog_page_names_every_global_option_and_environment_variable() -> None:
    text = _unescaped(_page(manpages.Page.RLOG))
    root = manpages.root_command()
    ctx = root.make_context("rlog", [], resilient_parsing=True)
    global_options = text.split("\n.SH GLOBAL OPTIONS\n", 1)[1].split("\n.SH ", 1)[0]
    environment = text.split("\n.SH ENVIRONMENT\n", 1)[1].split("\n.SH ", 1)[0]
    flags = [f for p in manpages.visible_params(root, ctx) for f in manpages.option_flags(p)]
    assert "--help" in flags
    assert [f for f in flags if f"\\fB{f}\\fR" not in global_options] == []
    variables = {
        name
        for doc in [None, *manpages.walk_commands(root)]
        for param in (
            manpages.visible_params(root, ctx)
            if doc is None
            else manpages.visible_params(doc.command, doc.ctx)
        )
        for name in manpages.envvars(param)
    }
    assert {"RLOG_BOOTSTRAP", "RLOG_BROKERS", "RLOG_DATA_DIR", "RLOG_TIMEOUT"} <= variables
    assert [v for v in sorted(variables | {"NO_COLOR"}) if f"\\fB{v}\\fR" not in environment] == []


def test_rlog_page_lists_every_exit_code() -> None:
    from rlog.cli.terminal import ExitCode

    status = _page(manpages.Page.RLOG).split("\n.SH EXIT STATUS\n", 1)[1].split("\n.SH ", 1)[0]
    assert [c for c in ExitCode if f"\\fB{int(c)}\\fR" not in status] == []


def test_rlogd_page_names_every_option_and_exit_code() -> None:
    from rlog.daemon.exit_codes import ExitCode

    text = _unescaped(_page(manpages.Page.RLOGD))
    flags = [f for a in manpages.rlogd_options(manpages.rlogd_parser()) for f in a.option_strings]
    assert "--data-dir" in flags
    assert [f for f in flags if f"\\fB{f}\\fR" not in text] == []
    assert [c for c in ExitCode if f"\\fB{int(c)}\\fR" not in text] == []


def test_rlog_toml_page_documents_every_config_key() -> None:
    from rlog.daemon import config

    text = _unescaped(_page(manpages.Page.RLOG_TOML))
    keys = [("cluster", k.key) for k in manpages.config_keys() if k.table == "cluster"]
    keys += [("broker", key) for key in config._BROKER_KEYS]
    assert len(keys) == len(manpages.config_keys())
    missing = []
    for table, key in keys:
        section = text.split(f'\n.SH "[{table}] TABLE"\n', 1)[1].split("\n.SH ", 1)[0]
        name = f'"{key}"' if "." in key else key
        if f"\\fB{name}\\fR" not in section:
            missing.append(f"[{table}] {key}")
    assert not missing, "rlog.toml.5 does not document: " + ", ".join(missing)


def test_every_config_key_has_prose_in_the_example_config() -> None:
    """The page's prose comes from configs/single-broker.toml: a new key needs a comment there.

    A key right below another key, with no comment of its own, shares that key's comment
    (restart_backoff_max_ms); the first key of a table must have its own.
    """
    in_example = manpages.documented_comments()[0]
    keys = manpages.config_keys()
    absent = [f"[{k.table}] {k.key}" for k in keys if (k.table, k.key) not in in_example]
    assert not absent, f"keys missing from {manpages.EXAMPLE_CONFIG}: {absent}"
    firsts = {k.table: k for k in reversed(keys)}.values()
    assert [f"[{k.table}] {k.key}" for k in firsts if not k.prose] == []


def _renderer_output(command: list[str], path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MANWIDTH": "80", "MANPAGER": "cat", "PAGER": "cat", "LC_ALL": "C.UTF-8"}
    return subprocess.run(
        [*command, str(path)], capture_output=True, text=True, env=env, timeout=60, check=False
    )


RENDERERS = {
    "groff": ["groff", "-man", "-Tutf8", "-ww", "-z"],
    "man": ["man", "--warnings", "-l"],
    "mandoc": ["mandoc", "-T", "lint", "-W", "warning"],
}


@pytest.mark.parametrize("renderer", list(RENDERERS))
@pytest.mark.parametrize("page", list(manpages.Page), ids=str)
def test_page_renders_without_warnings(renderer: str, page: manpages.Page) -> None:
    command = RENDERERS[renderer]
    if shutil.which(command[0]) is None:
        pytest.skip(
            f"{command[0]} is not installed "
            "(Debian/Ubuntu: apt-get install -y man-db groff-base, or mandoc)"
        )
    result = _renderer_output(command, MAN_DIR / manpages.FILE_NAMES[page])
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", f"{renderer} warns about {page}:\n{result.stderr}"
    if renderer == "man":
        assert "NAME" in result.stdout and "SEE ALSO" in result.stdout
