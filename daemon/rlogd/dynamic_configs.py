"""Cluster-wide dynamic broker configs, set at the controller (IncrementalAlterConfigs) so
every broker applies them without a restart."""

from __future__ import annotations

import asyncio
import logging
import ssl
import time

from rlog.core.protocol.apis import ApiKey
from rlog.daemon import config_reload
from rlog.daemon.wire import KafkaClient, WireError

log = logging.getLogger("rlogd")

DYNAMIC_CONFIG_TIMEOUT_S = 15.0  # the controller may be restarting
RESOURCE_BROKER = 4  # IncrementalAlterConfigs: the broker resource ("" = cluster default)


async def push_dynamic(
    controller: tuple[str, int],
    configs: dict[str, str | None],
    tls: ssl.SSLContext | None = None,
) -> str | None:
    """Set (or with None remove) cluster-wide dynamic configs at the controller (its host and
    port); the problem it reports, or None."""
    body = {
        "resources": [
            {
                "resource_type": RESOURCE_BROKER,
                "resource_name": "",
                "configs": [
                    {"name": name, "config_operation": 0 if value is not None else 1,
                     "value": value}
                    for name, value in configs.items()
                ],
            }
        ],
        "validate_only": False,
    }  # fmt: skip
    client = KafkaClient(*controller, client_id="rlogd", tls=tls)
    deadline = time.monotonic() + DYNAMIC_CONFIG_TIMEOUT_S
    try:
        while True:
            try:
                answer = await client.request(
                    ApiKey.INCREMENTAL_ALTER_CONFIGS, 0, body, timeout_s=5.0
                )
                break
            except WireError as error:
                if time.monotonic() >= deadline:
                    return f"the controller did not answer: {error}"
                await asyncio.sleep(0.5)
    finally:
        client.close()
    (result,) = answer["responses"]
    if result["error_code"] != 0:
        return result.get("error_message") or f"error {result['error_code']}"
    return None


async def clear_stale_dynamic_configs(
    controller: tuple[str, int], tls: ssl.SSLContext | None = None
) -> None:
    """Brokers read the file at start: drop dynamic defaults an earlier run pushed."""
    names = dict.fromkeys(config_reload.DYNAMIC_BROKER_KEYS.values())
    problem = await push_dynamic(controller, names, tls)
    if problem is not None:
        log.warning("could not clear earlier dynamic configs: %s", problem)
