"""The config file, live: an edit of it (seen by a watcher, or made by `rlog config set`)
is validated and applied to the running cluster: dynamic keys through the controller, rlogd's
own at once, and static ones reported as needing a restart."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from typing import Any

from rlog.daemon import config_reload
from rlog.daemon.config import (
    ConfigError,
    RlogConfig,
    load_config,
    parse_config,
    with_cluster_flags,
)
from rlog.daemon.config_watch import ConfigWatcher
from rlog.daemon.control import ControlError
from rlog.daemon.rlogd.cluster import Cluster
from rlog.daemon.rlogd.dynamic_configs import push_dynamic

log = logging.getLogger("rlogd")

RELOAD_DEBOUNCE_S = 0.2  # an editor's save is a burst of events: reload once it is over


class ConfigReloader:
    """Applies edits of the config file; answers the control socket's config ops."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.pending_restart: list[str] = []  # static keys edited since the start
        # The file as last read, without rlogd's flags: an edit of a key a flag sets is told
        # once, when the file changes it, not at every reload.
        self._written: RlogConfig | None = None
        if cluster.config_path is not None:
            with contextlib.suppress(ConfigError):
                self._written = load_config(cluster.config_path)
        self._lock = asyncio.Lock()
        self._pending: asyncio.Future[None] | None = None

    def watch(self) -> ConfigWatcher | None:
        """Reload on every edit of the config file (watchdog), debounced on the loop."""
        config_path = self.cluster.config_path
        if config_path is None:
            return None
        loop = asyncio.get_running_loop()

        def edited() -> None:  # on watchdog's thread
            loop.call_soon_threadsafe(self._schedule)

        watcher = ConfigWatcher(config_path, edited)
        try:
            watcher.start()
        except OSError as error:
            log.warning("not watching %s for edits: %s", config_path, error)
            return None
        return watcher

    def _schedule(self) -> None:
        if self._pending is not None and not self._pending.done():
            self._pending.cancel()  # editors write in bursts: reload once they stop
        self._pending = asyncio.ensure_future(self._reload_after(RELOAD_DEBOUNCE_S))

    async def _reload_after(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        await self.reload()

    async def reload(self, text: str | None = None) -> dict[str, Any]:
        """Apply the config file (or `text`, about to be written to it) to the running cluster:
        dynamic keys through the controller, rlogd's own at once, static ones reported."""
        cluster = self.cluster
        assert cluster.config_path is not None
        async with self._lock:
            source = str(cluster.config_path)
            try:
                if text is None:
                    text = cluster.config_path.read_text()
                written = parse_config(text, source)
                # As at start: the flags rlogd was given stay over the file's [cluster] keys.
                edited = with_cluster_flags(written, cluster.flags)
            except (OSError, ConfigError) as error:
                message = f"config edit rejected, the running config stays: {error}"
                log.error("%s", message)
                cluster.journal.record("config_rejected", message, path=source)
                raise ControlError(message, "bad-request") from None
            change = config_reload.changes(cluster.config, edited)
            nodes_before = cluster.config.broker.node_listeners
            if nodes_before != edited.broker.node_listeners:  # read at start, like listeners
                change.static.append("[controller] / [broker.N] listeners")
            before = self._written if self._written is not None else written
            change.overridden = config_reload.overridden(before, written, cluster.flags)
            if change.dynamic:
                # From any host's rlogd: the controller applies them cluster-wide.
                host, port, tls = cluster.controller_address()
                problem = await push_dynamic((host, port), dict(change.dynamic), tls)
                if problem is not None:
                    message = f"config edit not applied: the controller refused it: {problem}"
                    cluster.journal.record("config_rejected", message, path=source)
                    raise ControlError(message)
            cluster.config = config_reload.applied(cluster.config, edited)
            self._written = written
            self.pending_restart = sorted(set(self.pending_restart) | set(change.static))
            if not change.empty:
                message = f"config reloaded: {change.describe()}"
                log.info("%s", message)
                cluster.journal.record(
                    "config_reloaded",
                    message,
                    path=source,
                    dynamic=change.dynamic,
                    rlogd=change.rlogd,
                    needs_restart=change.static,
                )
            cluster.write_status()
            return {
                "message": change.describe(),
                "applied": change.dynamic,
                "rlogd": change.rlogd,
                "needs_restart": change.static,
                "overridden": change.overridden,
            }

    async def request(self, op: str, request: dict[str, Any]) -> dict[str, Any]:
        """config: what is in force; config_set: edit one key in the file and apply it."""
        config_path = self.cluster.config_path
        if op == "config":
            return {
                "path": str(config_path) if config_path else None,
                "config": config_reload.as_tables(self.cluster.config),
                "needs_restart": self.pending_restart,
            }
        if config_path is None:
            raise ControlError(
                "rlogd runs without a config file: start it with rlog cluster up (which gives "
                "it DATA_DIR/rlog.toml) or rlogd --config FILE to change settings live"
            )
        key, value = request.get("key"), request.get("value")
        if not isinstance(key, str) or not isinstance(value, str):
            raise ControlError("config_set needs 'key' and 'value' (strings)", "bad-request")
        try:
            text = config_reload.set_key(config_path.read_text(), key, value)
        except (OSError, ConfigError) as error:
            raise ControlError(f"not changed: {error}", "bad-request") from None
        reply = await self.reload(text)  # validated and applied before it is written
        temporary = config_path.with_name(config_path.name + ".rlog-tmp")
        temporary.write_text(text)
        os.replace(temporary, config_path)
        return {"key": key, "value": value, **reply}
