"""All of the CLI's output: tables or JSON on stdout, notes and one-line errors on stderr.

Commands never call ``print``: they hand rows, documents and records to a :class:`Terminal`,
which decides between text and ``--json`` and colours text only when the stream is a TTY
(and ``NO_COLOR`` is unset, unless ``--color always``). Every failure the user can cause or
meet (a bad flag, a cluster that is not running, an unknown topic, a broker that does not
answer) is a :class:`CliError` carrying an :class:`ExitCode`; ``app.main`` prints it as one
line on stderr. Anything else escaping a command is a bug and keeps its traceback.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from enum import IntEnum, StrEnum
from typing import IO, Any

import typer

from rlog.cli.progress import LiveLine, is_tty

PROGRAM = "rlog"


class ExitCode(IntEnum):
    """Process exit codes; scripts may rely on them, so values never change meaning."""

    OK = 0
    FAILURE = 1  # the cluster refused the request, or another error with no code of its own
    USAGE = 2  # a bad flag or argument (click's own convention)
    NOT_RUNNING = 3  # no running cluster in the data dir
    UNREACHABLE = 4  # the cluster's address is known but no broker answers
    NOT_FOUND = 5  # unknown topic, partition or process (`rlog chaos` target)
    ALREADY_EXISTS = 6  # topic already exists
    DELIVERY_FAILED = 7  # some produced records were not acknowledged
    DEGRADED = 8  # `cluster status`: rlogd runs but some brokers do not answer
    TIMEOUT = 9  # an operation did not finish before its deadline
    INVALID = 10  # `rlog verify`: the history breaks what the run's settings promise
    INTERRUPTED = 130  # Ctrl-C, as shells report SIGINT


class CliError(Exception):
    """An error for the user: printed as one line on stderr, then exit with ``code``.

    ``details`` are extra lines printed after it (only where more than one line is the
    point, e.g. the tail of rlogd's log when it died while starting).
    """

    def __init__(
        self,
        message: str,
        code: ExitCode = ExitCode.FAILURE,
        details: Sequence[str] = (),
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.details = tuple(details)


class ColorMode(StrEnum):
    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"


_ANSI = {"bold": "1", "red": "31", "green": "32", "yellow": "33", "dim": "2"}


def _wants_color(stream: IO[str], mode: ColorMode) -> bool:
    if mode is ColorMode.ALWAYS:
        return True
    if mode is ColorMode.NEVER or os.environ.get("NO_COLOR"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def one_line(text: str) -> str:
    """Fold a message onto one line: errors must never spill over several."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


class Terminal:
    """The CLI's single output channel."""

    def __init__(
        self,
        stdout: IO[str] | None = None,
        stderr: IO[str] | None = None,
        color: ColorMode = ColorMode.AUTO,
        json_mode: bool = False,
    ) -> None:
        self.stdout = stdout if stdout is not None else sys.stdout
        self.stderr = stderr if stderr is not None else sys.stderr
        self.json_mode = json_mode
        self._color_out = _wants_color(self.stdout, color)
        self._color_err = _wants_color(self.stderr, color)
        self.live: LiveLine | None = None  # a status line to erase before anything on stderr

    def live_line(self, *, beside_records: bool = False) -> LiveLine:
        """The status line of a long command: shown only when stderr is a terminal, and with
        `beside_records` (records printed on stdout) only when stdout is not that terminal."""
        enabled = is_tty(self.stderr) and not (beside_records and is_tty(self.stdout))
        self.live = LiveLine(self.stderr, enabled)
        return self.live

    # -- styling -------------------------------------------------------------------------

    def style(self, text: str, *styles: str, stream: str = "out") -> str:
        enabled = self._color_out if stream == "out" else self._color_err
        if not enabled or not styles:
            return text
        codes = ";".join(_ANSI[s] for s in styles)
        return f"\x1b[{codes}m{text}\x1b[0m"

    def clear_live(self) -> None:
        if self.live is not None:
            self.live.clear()

    # -- stdout --------------------------------------------------------------------------

    def line(self, text: str = "") -> None:
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def lines(self, texts: Iterable[str]) -> None:
        for text in texts:
            self.stdout.write(text + "\n")
        self.stdout.flush()

    def json(self, document: Any, *, compact: bool = False) -> None:
        """One JSON document on stdout (compact = one line, for record streams)."""
        if compact:
            text = json.dumps(document, separators=(",", ":"), ensure_ascii=False)
        else:
            text = json.dumps(document, indent=2, ensure_ascii=False)
        self.stdout.write(text + "\n")
        self.stdout.flush()

    def table(
        self,
        headers: Sequence[str],
        rows: Iterable[Sequence[Any]],
        *,
        colors: dict[str, str] | None = None,
    ) -> None:
        """An rpk-style table: upper-case headers, columns padded with two spaces.

        ``colors`` maps a cell's text to a style (e.g. ``{"running": "green"}``).
        """
        cells = [[("-" if value is None else str(value)) for value in row] for row in rows]
        widths = [len(h) for h in headers]
        for row in cells:
            for i, value in enumerate(row):
                widths[i] = max(widths[i], len(value))
        header = "  ".join(h.ljust(widths[i]) for i, h in enumerate(headers)).rstrip()
        out = [self.style(header, "bold")]
        for row in cells:
            parts = []
            for i, value in enumerate(row):
                padded = value.ljust(widths[i]) if i < len(row) - 1 else value
                style = (colors or {}).get(value)
                parts.append(self.style(padded, style) if style else padded)
            out.append("  ".join(parts))
        self.lines(out)

    def write_bytes(self, data: bytes) -> None:
        """Raw record bytes (consume), written as given: values need not be text."""
        buffer = getattr(self.stdout, "buffer", None)
        if buffer is None:  # a text-only stream (tests): decode as best we can
            self.stdout.write(data.decode("utf-8", "replace"))
            self.stdout.flush()
            return
        try:
            buffer.write(data)
            buffer.flush()
        except BrokenPipeError:
            # The reader is gone (`rlog consume t | head`): stop quietly, as a finished read.
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, self.stdout.fileno())
            raise typer.Exit(int(ExitCode.OK)) from None

    # -- stderr --------------------------------------------------------------------------

    def note(self, text: str) -> None:
        """Progress and side remarks: stderr, so stdout stays clean for pipes and --json."""
        self.clear_live()
        self.stderr.write(text + "\n")
        self.stderr.flush()

    def warn(self, text: str) -> None:
        prefix = self.style(f"{PROGRAM}: warning:", "yellow", stream="err")
        self.note(f"{prefix} {one_line(text)}")

    def error(self, text: str, details: Sequence[str] = ()) -> None:
        prefix = self.style(f"{PROGRAM}: error:", "red", "bold", stream="err")
        self.note(f"{prefix} {one_line(text)}")
        for detail in details:
            self.note(self.style(detail, "dim", stream="err"))


def parse_properties(pairs: Sequence[str], flag: str = "-X") -> dict[str, str]:
    """``key=value`` strings (``-X``, ``--config``, ``--producer-props``) into a dict."""
    properties: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise CliError(f"{flag} expects key=value, got {pair!r}", ExitCode.USAGE)
        properties[key.strip()] = value
    return properties


def megabytes(size_bytes: int | None) -> str:
    """A process's RSS as `rlog cluster status` and the TUI show it: `41M`, or `-`."""
    return "-" if size_bytes is None else f"{size_bytes / 2**20:.0f}M"


def short_duration(seconds: float | None) -> str:
    """An uptime in one unit: `45s`, `12m`, `3h`, or `-`."""
    if seconds is None:
        return "-"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.0f}h"
