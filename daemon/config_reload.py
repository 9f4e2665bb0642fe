"""What an edit of rlog's TOML config changes in a running cluster, and the edit `rlog config set`
makes.

Three kinds of keys:
- dynamic broker keys (retention, min.insync.replicas, unclean election, the ISR lag time,
  flush settings) go to the controller as cluster-wide dynamic configs (IncrementalAlterConfigs
  on the default broker resource), so every broker applies them at once from the metadata log;
- rlogd's own restart and shutdown settings take effect in rlogd at once;
- every other key is static: the change is reported as needing a restart and not applied.

The file stays the source of truth: at start brokers read it, and rlogd clears the dynamic
defaults an earlier run set, so an edit made while rlogd was down is not hidden by an old one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from typing import Any

from rlog.daemon.config import (
    BROKER_KEYS,
    ClusterSettings,
    ConfigError,
    RlogConfig,
    parse_config,
)

# [broker] key -> the cluster-wide dynamic config the controller keeps (topic configs' names).
DYNAMIC_BROKER_KEYS = {
    "log.retention.ms": "retention.ms",
    "log.retention.bytes": "retention.bytes",
    "log.flush.interval.messages": "flush.messages",
    "log.flush.interval.ms": "flush.ms",
    "min.insync.replicas": "min.insync.replicas",
    "unclean.leader.election.enable": "unclean.leader.election.enable",
    "replica.lag.time.max.ms": "replica.lag.time.max.ms",
}
RLOGD_LIVE_KEYS = ("restart_policy", "restart_backoff_ms", "restart_backoff_max_ms")


@dataclass
class ConfigChange:
    dynamic: dict[str, str] = field(default_factory=dict)  # cluster config name -> value
    rlogd: dict[str, Any] = field(default_factory=dict)  # [cluster] key -> value
    static: list[str] = field(default_factory=list)  # "[table] key" needing a restart
    # "--flag value" of each [cluster] key the edit changed but one of rlogd's flags overrides
    overridden: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not (self.dynamic or self.rlogd or self.static or self.overridden)

    def describe(self) -> str:
        parts = []
        if self.dynamic:
            parts.append("applied " + ", ".join(f"{k}={v}" for k, v in self.dynamic.items()))
        if self.rlogd:
            parts.append("rlogd now uses " + ", ".join(f"{k}={v}" for k, v in self.rlogd.items()))
        if self.static:
            parts.append("needs a restart: " + ", ".join(self.static))
        if self.overridden:
            parts.append("rlogd's flags override the file: " + ", ".join(self.overridden))
        return "; ".join(parts) or "nothing changed"


def _text(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def changes(running: RlogConfig, edited: RlogConfig) -> ConfigChange:
    change = ConfigChange()
    for key, (attribute, _) in BROKER_KEYS.items():
        old, new = getattr(running.broker, attribute), getattr(edited.broker, attribute)
        if old == new:
            continue
        if key in DYNAMIC_BROKER_KEYS:
            change.dynamic[DYNAMIC_BROKER_KEYS[key]] = _text(new)
        else:
            change.static.append(f"[broker] {key}")
    for item in fields(ClusterSettings):
        old, new = getattr(running.cluster, item.name), getattr(edited.cluster, item.name)
        if old == new:
            continue
        if item.name in RLOGD_LIVE_KEYS:
            change.rlogd[item.name] = new
        else:
            change.static.append(f"[cluster] {item.name}")
    return change


CLUSTER_FLAGS = {"brokers": "--brokers", "base_port": "--base-port"}  # rlogd's, by key


def overridden(before: RlogConfig, after: RlogConfig, flags: dict[str, int]) -> list[str]:
    """The flags (``--base-port 9092``) that keep an edit of the file (``before`` to ``after``,
    both as written, without the flags) from taking effect."""
    return [
        f"{CLUSTER_FLAGS[key]} {value}"
        for key, value in flags.items()
        if getattr(before.cluster, key) != getattr(after.cluster, key)
    ]


def applied(running: RlogConfig, edited: RlogConfig) -> RlogConfig:
    """The config in force after an edit: its dynamic and rlogd keys, the rest as running."""
    broker_changes = {
        BROKER_KEYS[key][0]: getattr(edited.broker, BROKER_KEYS[key][0])
        for key in DYNAMIC_BROKER_KEYS
    }
    cluster_changes = {name: getattr(edited.cluster, name) for name in RLOGD_LIVE_KEYS}
    return RlogConfig(
        cluster=replace(running.cluster, **cluster_changes),
        broker=replace(running.broker, **broker_changes),
    )


def as_tables(config: RlogConfig) -> dict[str, dict[str, Any]]:
    """The config as the TOML file names things, for `rlog config get`."""
    broker = {key: getattr(config.broker, attribute) for key, (attribute, _) in BROKER_KEYS.items()}
    cluster = {item.name: getattr(config.cluster, item.name) for item in fields(ClusterSettings)}
    return {"cluster": cluster, "broker": broker}


# ---- rlog config set: one key rewritten in the file, comments and order kept ----


def table_of(key: str) -> str:
    if key in BROKER_KEYS:
        return "broker"
    if key in {item.name for item in fields(ClusterSettings)}:
        return "cluster"
    raise ConfigError(f"{key}: unknown key (see rlog.toml(5) or rlog config get)")


def _toml_value(key: str, text: str) -> str:
    """VALUE as a TOML literal of the key's type (ConfigError if it is not one)."""
    cluster_kind = str if key == "restart_policy" else int
    kind = BROKER_KEYS[key][1] if key in BROKER_KEYS else cluster_kind
    if kind is bool:
        if text.lower() not in ("true", "false"):
            raise ConfigError(f"{key}: expected true or false, got {text!r}")
        return text.lower()
    if kind is int:
        if not re.fullmatch(r"[+-]?[0-9]+", text):
            raise ConfigError(f"{key}: expected an integer, got {text!r}")
        return str(int(text))
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def set_key(document: str, key: str, value: str) -> str:
    """The config text with KEY set to VALUE (replacing its line, or added to its table), checked
    by parsing it: ConfigError if the result is not a valid config."""
    table = table_of(key)
    literal = _toml_value(key, value)
    name = f'"{key}"' if "." in key else key
    line = f"{name} = {literal}"
    lines = document.splitlines()
    quoted = re.escape(key)
    key_pattern = re.compile(rf"""^\s*(?:"{quoted}"|'{quoted}'|{quoted})\s*=""")
    current_table = None
    header_at = None
    for index, text in enumerate(lines):
        header = re.match(r"^\s*\[([A-Za-z0-9_.-]+)\]\s*(#.*)?$", text)
        if header:
            current_table = header.group(1)
            if current_table == table:
                header_at = index
            continue
        if current_table == table and key_pattern.match(text):
            lines[index] = line
            break
    else:
        if header_at is None:
            lines += ["", f"[{table}]", line]
        else:
            lines.insert(header_at + 1, line)
    edited = "\n".join(lines) + "\n"
    parse_config(edited, "the edited config")
    return edited
