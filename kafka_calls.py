"""Calls into librdkafka that must not block past their deadline.

`send_offsets_to_transaction` can ignore its timeout and block forever when the group
coordinator goes away mid-call (librdkafka issues #5456 and #5511: a coordinator request is
never timed out, and a coordinator dropped from the metadata is never looked up again). Kafka
and rlog both leave a fenced broker out of Metadata, so killing the group coordinator is enough.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class CallTimedOut(Exception):
    """The call did not return in time; the client is stuck and must be replaced."""


def call_with_deadline(what: str, action: Callable[[], None], seconds: float) -> None:
    """Run `action` on a daemon thread and wait at most `seconds` for it. Its exception is
    raised here; if it never returns, CallTimedOut is, and the thread is left behind (the
    caller replaces the stuck client, whose new instance fences the old one)."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            action()
            outcome.append(None)
        except BaseException as error:  # handed to the caller's thread
            outcome.append(error)

    thread = threading.Thread(target=run, name=f"bounded {what}", daemon=True)
    thread.start()
    thread.join(seconds)
    if not outcome:
        raise CallTimedOut(f"{what} did not return within {seconds:g} s")
    if outcome[0] is not None:
        raise outcome[0]
