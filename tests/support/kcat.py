"""kcat (Debian's package, on librdkafka), found on PATH or fetched without root.

When `kcat` is not installed, `apt-get download` fetches the .deb files of kcat and of those of
its dependencies that the machine lacks (librdkafka1, libyajl2, ...) into the user's cache
directory (`$XDG_CACHE_HOME/rlog/interop/kcat/`); `dpkg-deb -x` unpacks them there, and kcat
runs with LD_LIBRARY_PATH pointing at the unpacked libraries. If apt's package lists are empty
(a machine where `apt-get update` never ran), a private copy of the lists is fetched into the
same directory first: that needs no root either.
"""

from __future__ import annotations

import fcntl
import getpass
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from support.kafka_tools import cache_dir


class KcatUnavailable(RuntimeError):
    """kcat is not installed and apt could not fetch it."""


def apt_options(lists: Path | None) -> list[str]:
    """apt options for a private copy of the package lists (None: the system's lists). apt runs
    as us, not as its sandbox user, who could not write to our directory."""
    options = ["-q", "-o", f"APT::Sandbox::User={getpass.getuser()}"]
    if lists is not None:
        cache = lists.parent / "apt-cache"
        options += ["-o", f"Dir::State::Lists={lists}", "-o", f"Dir::Cache={cache}"]
    return options


def run_tool(
    tool: str, *args: str, cwd: Path, timeout_s: float = 300
) -> subprocess.CompletedProcess[str]:
    """Run an apt or dpkg tool, its messages in English (we read them)."""
    return subprocess.run(
        [tool, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout_s,
        stdin=subprocess.DEVNULL, env={**os.environ, "LC_ALL": "C"},
    )  # fmt: skip


def dependency_closure(home: Path, lists: Path | None) -> list[str] | None:
    """kcat and every package it depends on, recursively (None if apt does not know kcat)."""
    result = run_tool(
        "apt-cache", *apt_options(lists), "depends", "--recurse", "--no-recommends",
        "--no-suggests", "--no-conflicts", "--no-breaks", "--no-replaces", "--no-enhances", "kcat",
        cwd=home,
    )  # fmt: skip
    if result.returncode != 0:
        return None
    # Top-level lines name packages; indented ones are their dependencies, listed again at the
    # top level themselves; <virtual> packages are provided by real ones that are listed.
    return sorted({line for line in result.stdout.splitlines() if line and line[0] not in " <"})


def not_installed(packages: list[str], home: Path) -> list[str]:
    result = run_tool("dpkg-query", "-W", "-f", "${Package} ${db:Status-Abbrev}\n", *packages,
                     cwd=home)  # fmt: skip
    # Status-Abbrev "ii" is installed; "rc" (removed, its configuration kept) and others are not.
    installed = {
        parts[0] for parts in map(str.split, result.stdout.splitlines()) if parts[1:2] == ["ii"]
    }
    return [package for package in packages if package.split(":")[0] not in installed]


def missing_libraries(binary: Path, library_path: str) -> list[str]:
    """The shared libraries `ldd` cannot find for `binary`."""
    result = subprocess.run(
        ["ldd", str(binary)], capture_output=True, text=True, timeout=30,
        env={**os.environ, "LD_LIBRARY_PATH": library_path},
    )  # fmt: skip
    return re.findall(r"^\s*(\S+) => not found", result.stdout, re.MULTILINE)


def library_path(root: Path) -> str:
    """The directories of the unpacked shared libraries, for LD_LIBRARY_PATH."""
    return os.pathsep.join(sorted({str(lib.parent) for lib in root.rglob("*.so*")}))


def download_debs(home: Path, debs: Path) -> list[str]:
    """Download into `debs` kcat and those of its dependencies the machine lacks; their names.
    The system's package lists are tried first; if they are missing or stale (a download
    fails), a private copy fetched into `home` is used."""
    failures: list[str] = []
    for lists in (None, home / "apt-lists"):
        if lists is not None:
            (lists / "partial").mkdir(parents=True, exist_ok=True)
            (home / "apt-cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
            updated = run_tool("apt-get", *apt_options(lists), "update", cwd=home, timeout_s=600)
            if updated.returncode != 0:
                failures.append(f"apt-get update: {updated.stderr.strip()}")
                break
        closure = dependency_closure(home, lists)
        if closure is None:
            failures.append(f"apt-cache does not know kcat (package lists: {lists or 'system'})")
            continue
        wanted = not_installed(closure, home)
        shutil.rmtree(debs, ignore_errors=True)
        debs.mkdir(parents=True)
        downloaded = run_tool("apt-get", *apt_options(lists), "download", *wanted, cwd=debs)
        if downloaded.returncode == 0:
            return wanted
        failures.append(f"apt-get download {' '.join(wanted)}: {downloaded.stderr.strip()}")
    raise KcatUnavailable("kcat is not installed and could not be fetched:\n" + "\n".join(failures))


def fetch() -> Kcat:
    """kcat from PATH, else the unpacked Debian package (downloaded on first use). A lock keeps
    two test processes from fetching into the same directory at once."""
    installed = shutil.which("kcat")
    if installed is not None:
        return Kcat(Path(installed), library_path="")
    home = cache_dir() / "kcat"
    root = home / "root"
    binary = root / "usr" / "bin" / "kcat"
    done = home / ".complete"
    if done.exists():
        return Kcat(binary, library_path(root))
    for tool in ("apt-get", "apt-cache", "dpkg-deb", "dpkg-query", "ldd"):
        if shutil.which(tool) is None:
            raise KcatUnavailable(f"kcat is not installed, and {tool} to fetch it is missing")
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if done.exists():
            return Kcat(binary, library_path(root))
        debs = home / "debs"
        shutil.rmtree(root, ignore_errors=True)
        wanted = download_debs(home, debs)
        for deb in sorted(debs.glob("*.deb")):
            subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True, timeout=120)
        missing = missing_libraries(binary, library_path(root))
        if missing:
            raise KcatUnavailable(f"kcat still lacks {', '.join(missing)} after unpacking {wanted}")
        done.write_text(" ".join(wanted))
    return Kcat(binary, library_path(root))


@dataclass(frozen=True)
class Kcat:
    """Runs one kcat binary (with its unpacked libraries, if any)."""

    binary: Path
    library_path: str

    def run(
        self, *args: str, input: str | None = None, timeout_s: float = 60.0
    ) -> subprocess.CompletedProcess[str]:
        environment = dict(os.environ)
        if self.library_path:
            environment["LD_LIBRARY_PATH"] = os.pathsep.join(
                filter(None, [self.library_path, os.environ.get("LD_LIBRARY_PATH")])
            )
        return subprocess.run(
            [str(self.binary), *args], input=input, capture_output=True, text=True,
            timeout=timeout_s, env=environment,
            stdin=None if input is not None else subprocess.DEVNULL,
        )  # fmt: skip

    def librdkafka_version(self) -> tuple[int, ...]:
        """The version of the librdkafka kcat runs on, from `kcat -V` ("librdkafka 2.0.2")."""
        done = self.run("-V", timeout_s=10)
        found = re.search(r"librdkafka (\d+(?:\.\d+)*)", done.stdout + done.stderr)
        assert found is not None, f"kcat -V names no librdkafka version:\n{done.stdout}"
        return tuple(int(part) for part in found.group(1).split("."))

    def ok(self, *args: str, input: str | None = None, timeout_s: float = 60.0) -> str:
        """Run kcat, which must exit 0; its stdout."""
        done = self.run(*args, input=input, timeout_s=timeout_s)
        assert done.returncode == 0, (
            f"kcat {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
        )
        return done.stdout
