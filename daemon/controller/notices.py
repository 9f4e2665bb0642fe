"""What rlogd tells the controller on its stdin: one JSON object per line.

rlogd is the parent of every broker, so it sees a broker's process end the moment it happens;
the controller would otherwise learn of it only when the broker's session expires
(broker.session.timeout.ms). The only notice today:

    {"op": "broker_exited", "broker_id": 2, "incarnation_id": "0b8e...-..."}

It is not a Kafka API: no client can send it, only the process that started this one. A line
that does not parse is logged and skipped; the end of stdin (rlogd gone) ends the reader, and the
heartbeat timeout remains the way the controller notices deaths.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from typing import Any

from rlog.core.controller import BrokerProcessExitedRequest, BrokerProcessExitedResponse
from rlog.daemon.controller.service import ControllerFailed, ControllerService

log = logging.getLogger("rlog.controller")

NOTICE_MAX_BYTES = 64 * 1024  # a notice is one small JSON object


async def read_notices(service: ControllerService) -> None:
    """Step every notice that arrives on stdin into the controller, until stdin ends."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=NOTICE_MAX_BYTES)
    try:
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    except (OSError, ValueError) as error:  # stdin is not a pipe: started by hand
        log.warning("cannot read rlogd's notices on stdin: %s", error)
        return
    while True:
        try:
            line = await reader.readline()
        except ValueError:  # longer than the limit: not ours
            log.warning("skipped a notice longer than %d bytes", NOTICE_MAX_BYTES)
            continue
        if not line:
            log.info("rlogd's notices ended (stdin closed)")
            return
        await handle_notice(service, line)


async def handle_notice(service: ControllerService, line: bytes) -> None:
    notice = _parse(line)
    if notice is None:
        return
    broker_id, incarnation_id = notice
    try:
        response = await service.submit(
            lambda token: BrokerProcessExitedRequest(token, broker_id, incarnation_id)
        )
    except ControllerFailed:
        return
    assert isinstance(response, BrokerProcessExitedResponse)
    log.info("rlogd: broker %d's process exited: %s", broker_id, response.message)


def _parse(line: bytes) -> tuple[int, str] | None:
    try:
        notice: Any = json.loads(line)
    except ValueError:
        log.warning("skipped a notice that is not JSON: %r", line[:200])
        return None
    if (
        not isinstance(notice, dict)
        or notice.get("op") != "broker_exited"
        or not isinstance(notice.get("broker_id"), int)
        or not isinstance(notice.get("incarnation_id"), str)
    ):
        log.warning("skipped an unknown notice: %r", line[:200])
        return None
    return notice["broker_id"], notice["incarnation_id"]
