"""The AdminClient the topic and group commands share, and how its failures read.

Admin handles are producer-type in librdkafka: their Metadata requests would ask the broker to
auto-create the topic named (`topic describe missing`, `group reset-offsets --topic missing`),
so auto-creation is off for them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from rlog.cli.discovery import (
    Settings,
    check_reachable,
    client_config,
    kafka_error,
    resolve_bootstrap,
)
from rlog.cli.terminal import CliError, ExitCode, parse_properties

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON.")]
PropertyOption = Annotated[
    list[str] | None,
    typer.Option("-X", help="Any client property key=value (repeatable).", show_default=False),
]


@dataclass
class Admin:
    """An AdminClient plus what error messages need to know about it."""

    client: AdminClient
    bootstrap: str
    timeout_s: float

    def result(self, future: Any, action: str, topic: str | None = None) -> Any:
        """The future's result, or one CliError that says what failed and why."""
        try:
            return future.result(timeout=self.timeout_s + 5)
        except KafkaException as exc:
            raise kafka_error(exc, bootstrap=self.bootstrap, action=action, topic=topic) from None
        except TimeoutError:
            raise self.timeout_error(action) from None

    def timeout_error(self, action: str) -> CliError:
        return CliError(f"{action}: no answer within {self.timeout_s:g} s", ExitCode.TIMEOUT)


def open_admin(settings: Settings, properties: list[str] | None) -> Admin:
    bootstrap = resolve_bootstrap(settings)
    check_reachable(bootstrap, settings.timeout_s)
    config = {"allow.auto.create.topics": "false"}
    config.update(parse_properties(properties or []))
    client = AdminClient(client_config(settings, bootstrap, config, role="admin"))
    return Admin(client, bootstrap, settings.timeout_s)
