"""SIGTERM as Ctrl-C for the CLI's long-running commands (``rlog produce``, ``rlog consume``).

kill, systemd, a container stopping or a test harness end a process with SIGTERM; left at its
default it dies on the spot, with its consumer group joined (45 s until the session expires)
or its transaction open. Within :func:`exits_on_sigterm` it raises :class:`Terminated`, a
KeyboardInterrupt, so every Ctrl-C path runs, and the command exits 143 (128 + 15, as shells
report it and kafka-console-consumer exits) instead of Ctrl-C's 130.
"""

from __future__ import annotations

import contextlib
import functools
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import ParamSpec, TypeVar

import typer

TERMINATED = 143  # the exit status after SIGTERM: 128 + 15, as after Ctrl-C 128 + 2 (130)

P = ParamSpec("P")
R = TypeVar("R")


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where Ctrl-C raises KeyboardInterrupt, so it takes the same way out:
    every ``except KeyboardInterrupt`` and ``finally`` on the way runs (a consumer leaves its
    group, an open transaction is aborted)."""


def raise_terminated(_signum: int, _frame: FrameType | None) -> None:
    raise Terminated


def interrupt_for(signum: int) -> KeyboardInterrupt:
    """The exception a held SIGINT or SIGTERM becomes (see consume.deferred_interrupt)."""
    return Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block SIGTERM raises :class:`Terminated`; a command ended by it exits with
    TERMINATED. Left alone where SIGTERM is ignored or outside the main thread."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    ):
        yield
        return
    previous = signal.signal(signal.SIGTERM, raise_terminated)
    try:
        yield
    except Terminated:
        raise typer.Exit(TERMINATED) from None
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL if previous is None else previous)


def exits_on_sigterm(command: Callable[P, R]) -> Callable[P, R]:
    """A command that SIGTERM (kill, systemd, a container stopping, a test harness) ends the
    way Ctrl-C does, instead of dying on the spot with its group joined or its transaction
    open."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        with sigterm_as_interrupt():
            return command(*args, **kwargs)

    return run
