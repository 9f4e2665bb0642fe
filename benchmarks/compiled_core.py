"""What compiling the broker's hot path would buy: a copy of this checkout with the core's
per-request modules compiled by mypyc, for the other benchmarks to run against.

    pip install -e '.[bench]'                    # mypy, which ships mypyc; a C compiler too
    python benchmarks/compiled_core.py           # builds once per source state (~4 minutes)
    PYTHONPATH=$(python benchmarks/compiled_core.py) python benchmarks/bench_request_cost.py
    PYTHONPATH=$(python benchmarks/compiled_core.py) python benchmarks/bench_small_requests.py

rlog is Python, and for small requests its brokers spend their CPU in Python: user time was
82-96 % of it in bench_request_cost.py's setups, and under bench_small_requests.py's steady load
py-spy (its --profile) put about half of each broker's samples under BrokerCore.step. mypyc compiles
type-annotated Python modules to C extensions with the same behaviour, and the core type-checks
clean under mypy. This script copies the package's files from this checkout into
~/.cache/rlog/compiled/DIGEST/rlog/ (DIGEST: of the files' contents and mypy's version, so an
edited checkout builds afresh), compiles HOT_MODULES there in place, checks that they import
compiled, and prints the directory to put on PYTHONPATH; progress goes to stderr. Processes
started with it (the brokers `rlog cluster up` starts included) import rlog from the copy:
compiled where it could be, Python elsewhere (the daemon, the codec's generated functions,
the controller, groups and transactions).

It is a measurement, not a way to run rlog: nothing of the build reaches the checkout or the
installed package, and the suite and the simulator run the Python sources. Left out of
HOT_MODULES: core/storage/files.py, because the daemon's chaos file system subclasses its
classes and an interpreted class cannot derive from a compiled one, and
core/broker/verification.py, whose dataclass with a field annotated `object` mypyc's build
cannot import (a KeyError when the class is made).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from peers.common import cache_dir

CHECKOUT = Path(__file__).resolve().parent.parent  # the repository root is the rlog package
# The core's modules on the path of a Produce and a Fetch, by glob from the package root.
HOT_MODULES = (
    "core/records.py",
    "core/record_validation.py",
    "core/producer_state.py",
    "core/limits.py",
    "core/storage/*.py",
    "core/replication/*.py",
    "core/broker/*.py",
    "core/protocol/connection.py",
    "core/protocol/codec.py",
)
NOT_COMPILED = {"core/storage/files.py", "core/broker/verification.py"}
SKIPPED_DIRS = {"tests", "benchmarks", "examples", "__pycache__", "build"}
PROBE = "rlog.core.broker.broker"  # imported from the build to check it is compiled


def package_files(root: Path) -> list[Path]:
    """The package's own files under `root`, relative to it: no tests, benchmarks or caches, so
    only an edit of the package itself changes the digest."""
    files: list[Path] = []
    for directory, subdirs, names in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if not skipped(d))
        for name in sorted(names):
            if not name.endswith((".so", ".pyc")):
                files.append(Path(directory, name).relative_to(root))
    return files


def skipped(directory: str) -> bool:
    """Hidden directories (.git, .ruff_cache, .hypothesis) and what is not the package."""
    return directory in SKIPPED_DIRS or directory.startswith(".") or directory.endswith(".egg-info")


def digest_of(root: Path, files: list[Path], mypy_version: str) -> str:
    digest = hashlib.sha256(mypy_version.encode())
    for relative in files:
        digest.update(str(relative).encode() + b"\0" + (root / relative).read_bytes())
    return digest.hexdigest()[:16]


def hot_modules(package: Path) -> list[str]:
    found: list[str] = []
    for pattern in HOT_MODULES:
        for path in sorted(package.glob(pattern)):
            relative = str(path.relative_to(package))
            if path.name != "__init__.py" and relative not in NOT_COMPILED:
                found.append(f"rlog/{relative}")
    return found


def build(target: Path, files: list[Path]) -> None:
    """Copy `files` into target/rlog and compile the hot modules there (the shared runtime
    library mypyc makes lands in `target`, which is on PYTHONPATH)."""
    staging = Path(tempfile.mkdtemp(prefix="building-", dir=target.parent))
    try:
        package = staging / "rlog"
        for relative in files:
            (package / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(CHECKOUT / relative, package / relative)
        config = staging / "mypy.ini"
        config.write_text("[mypy]\nignore_missing_imports = True\n")
        modules = hot_modules(package)
        print(f"compiling {len(modules)} modules with mypyc in {staging}", file=sys.stderr)
        command = [sys.executable, "-m", "mypyc", "--config-file", str(config), *modules]
        done = subprocess.run(command, cwd=staging, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
            raise SystemExit(f"mypyc failed:\n{tail}")
        shutil.rmtree(staging / "build", ignore_errors=True)
        check_compiled(staging)
        staging.rename(target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_compiled(pythonpath: Path) -> None:
    probe = f"import {PROBE} as m; print(m.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env={**os.environ, "PYTHONPATH": str(pythonpath)},
        cwd=tempfile.gettempdir(),
        capture_output=True,
        text=True,
        check=False,
    )
    where = done.stdout.strip()
    if done.returncode != 0 or not where.endswith(".so"):
        raise SystemExit(f"the build does not import compiled: {where or done.stderr[-2000:]}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    try:
        import mypy.version
    except ImportError:
        raise SystemExit("needs mypy (it ships mypyc): pip install -e '.[bench]'") from None
    files = package_files(CHECKOUT)
    builds = cache_dir().parent / "compiled"
    builds.mkdir(parents=True, exist_ok=True)
    target = builds / digest_of(CHECKOUT, files, mypy.version.__version__)
    if target.exists():
        print(f"already built: {target}", file=sys.stderr)
    else:
        build(target, files)
        print(f"built: {target}", file=sys.stderr)
    print(target)


if __name__ == "__main__":
    main()
