"""``rlog topic create|list|describe|delete``, in kafka-topics.sh's words and formats.

``describe`` prints kafka-topics.sh ``--describe`` lines and adds what it does not show: the
leader epoch, the high watermark and each replica's log end offset.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from confluent_kafka import KafkaException, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from rlog.cli.discovery import (
    BootstrapOption,
    DataDirOption,
    Settings,
    check_reachable,
    client_config,
    kafka_error,
    resolve_bootstrap,
    settings_of,
)
from rlog.cli.terminal import CliError, ExitCode, Terminal, parse_properties

app = typer.Typer(help="Create, list, describe and delete topics.", no_args_is_help=True)

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


def _admin(settings: Settings, properties: list[str] | None) -> Admin:
    bootstrap = resolve_bootstrap(settings)
    check_reachable(bootstrap, settings.timeout_s)
    # Admin handles are producer-type in librdkafka, whose Metadata requests would ask the
    # broker to auto-create the topic: `describe missing` must not create it.
    config = {"allow.auto.create.topics": "false"}
    config.update(parse_properties(properties or []))
    client = AdminClient(client_config(settings, bootstrap, config, role="admin"))
    return Admin(client, bootstrap, settings.timeout_s)


def _result(admin: Admin, future: Any, action: str, topic: str | None = None) -> Any:
    try:
        return future.result(timeout=admin.timeout_s + 5)
    except KafkaException as exc:
        raise kafka_error(exc, bootstrap=admin.bootstrap, action=action, topic=topic) from None
    except TimeoutError:
        raise CliError(
            f"{action}: no answer within {admin.timeout_s:g} s", ExitCode.TIMEOUT
        ) from None


@app.command(no_args_is_help=True)
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Topic name.", show_default=False)],
    partitions: Annotated[int, typer.Option("--partitions", "-p", min=1)] = 1,
    replication_factor: Annotated[int, typer.Option("--replication-factor", "-r", min=1)] = 1,
    config: Annotated[
        list[str] | None,
        typer.Option(
            "--config", "-c", help="Topic config key=value (repeatable).", show_default=False
        ),
    ] = None,
    if_not_exists: Annotated[
        bool, typer.Option("--if-not-exists", help="Succeed if the topic already exists.")
    ] = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
    properties: PropertyOption = None,
) -> None:
    """Create a topic."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    configs = parse_properties(config or [], flag="--config")
    admin = _admin(settings, properties)
    new_topic = NewTopic(
        name, num_partitions=partitions, replication_factor=replication_factor, config=configs
    )
    futures = admin.client.create_topics([new_topic], request_timeout=settings.timeout_s)
    try:
        _result(admin, futures[name], "create topic", name)
    except CliError as error:
        if not (if_not_exists and error.code is ExitCode.ALREADY_EXISTS):
            raise
    settings.terminal.line(f"Created topic {name}.")


@app.command()
def delete(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Topic name.", show_default=False)],
    if_exists: Annotated[
        bool, typer.Option("--if-exists", help="Succeed if the topic does not exist.")
    ] = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
    properties: PropertyOption = None,
) -> None:
    """Delete a topic and its data."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    admin = _admin(settings, properties)
    futures = admin.client.delete_topics([name], request_timeout=settings.timeout_s)
    try:
        _result(admin, futures[name], "delete topic", name)
    except CliError as error:
        if not (if_exists and error.code is ExitCode.NOT_FOUND):
            raise
        return
    settings.terminal.line(f"Deleted topic {name}.")


def _metadata(admin: Admin, topic: str | None = None) -> Any:
    try:
        return admin.client.list_topics(topic=topic, timeout=admin.timeout_s)
    except KafkaException as exc:
        raise kafka_error(exc, bootstrap=admin.bootstrap, action="metadata", topic=topic) from None


@app.command("list")
def list_topics(
    ctx: typer.Context,
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
    properties: PropertyOption = None,
) -> None:
    """List topic names (with --json: partitions and replication factor too)."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    admin = _admin(settings, properties)
    topics = sorted(_metadata(admin).topics.values(), key=lambda t: t.topic)
    if json_out:
        settings.terminal.json(
            [
                {
                    "name": t.topic,
                    "partitions": len(t.partitions),
                    "replication_factor": _replication_factor(t),
                }
                for t in topics
            ]
        )
    else:
        settings.terminal.lines(t.topic for t in topics)


def _replication_factor(topic: Any) -> int:
    first = topic.partitions.get(0) or next(iter(topic.partitions.values()), None)
    return len(first.replicas) if first is not None else 0


# -- describe ---------------------------------------------------------------------------


@dataclass
class PartitionView:
    partition: int
    leader: int | None
    leader_epoch: int | None
    replicas: list[int]
    isr: list[int]
    high_watermark: int | None
    log_start_offset: int | None
    log_end_offsets: dict[str, int | None]

    def as_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class TopicView:
    topic: str
    partition_count: int
    replication_factor: int
    configs: dict[str, str]
    min_insync_replicas: int
    partitions: list[PartitionView]

    def as_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition_count": self.partition_count,
            "replication_factor": self.replication_factor,
            "configs": self.configs,
            "partitions": [p.as_json() for p in self.partitions],
        }


def _configs(admin: Admin, topic: str) -> tuple[dict[str, str], int]:
    """(the topic's own overrides, as kafka-topics shows them; min.insync.replicas)."""
    resource = ConfigResource(ResourceType.TOPIC, topic)
    futures = admin.client.describe_configs([resource], request_timeout=admin.timeout_s)
    entries = _result(admin, futures[resource], "describe configs", topic)
    overrides = {}
    for name, entry in sorted(entries.items()):
        source = ConfigSource(entry.source)
        if source is ConfigSource.DYNAMIC_TOPIC_CONFIG or (
            source is ConfigSource.UNKNOWN_CONFIG and not entry.is_default
        ):
            overrides[name] = "" if entry.value is None else str(entry.value)
    min_isr_entry = entries.get("min.insync.replicas")
    try:
        min_isr = int(min_isr_entry.value) if min_isr_entry is not None else 1
    except (TypeError, ValueError):
        min_isr = 1
    return overrides, min_isr


def _offsets(
    admin: Admin, topic: str, partitions: Sequence[int], spec: OffsetSpec
) -> dict[int, Any]:
    """ListOffsets for every partition: {partition: ListOffsetsResultInfo or None}."""
    if not partitions:
        return {}
    request = {TopicPartition(topic, p): spec for p in partitions}
    futures = admin.client.list_offsets(request, request_timeout=admin.timeout_s)
    found: dict[int, Any] = {}
    for tp, future in futures.items():
        try:
            found[tp.partition] = future.result(timeout=admin.timeout_s + 5)
        except (KafkaException, TimeoutError):
            found[tp.partition] = None  # e.g. leaderless: shown as "-"
    return found


def _describe_one(admin: Admin, metadata: Any, name: str) -> TopicView:
    topic = metadata.topics.get(name)
    if topic is None:
        raise CliError(f"unknown topic '{name}'", ExitCode.NOT_FOUND)
    if topic.error is not None:
        raise kafka_error(topic.error, bootstrap=admin.bootstrap, action="describe", topic=name)
    configs, min_isr = _configs(admin, name)
    ids = sorted(topic.partitions)
    latest = _offsets(admin, name, ids, OffsetSpec.latest())
    earliest = _offsets(admin, name, ids, OffsetSpec.earliest())
    views = []
    for pid in ids:
        meta = topic.partitions[pid]
        leader = meta.leader if meta.leader is not None and meta.leader >= 0 else None
        end, start = latest.get(pid), earliest.get(pid)
        high_watermark = end.offset if end is not None and end.offset >= 0 else None
        epoch = end.leader_epoch if end is not None and end.leader_epoch is not None else None
        # The leader's LEO: ListOffsets(latest) answers the HW, which equals the leader's LEO
        # while a partition has no followers. Followers' LEOs need the replication protocol.
        leos = {str(r): (high_watermark if r == leader else None) for r in meta.replicas}
        views.append(
            PartitionView(
                partition=pid,
                leader=leader,
                leader_epoch=epoch if epoch is None or epoch >= 0 else None,
                replicas=list(meta.replicas),
                isr=list(meta.isrs),
                high_watermark=high_watermark,
                log_start_offset=start.offset if start is not None and start.offset >= 0 else None,
                log_end_offsets=leos,
            )
        )
    return TopicView(name, len(ids), _replication_factor(topic), configs, min_isr, views)


def _keep(view: PartitionView, min_isr: int, filters: dict[str, bool]) -> bool:
    if not any(filters.values()):
        return True
    checks = {
        "under_replicated": len(view.isr) < len(view.replicas),
        "under_min_isr": len(view.isr) < min_isr,
        "at_min_isr": len(view.isr) == min_isr,
        "unavailable": view.leader is None,
    }
    return any(checks[name] for name, wanted in filters.items() if wanted)


def _dash(value: Any) -> str:
    return "-" if value is None else str(value)


def _text(view: TopicView) -> list[str]:
    configs = ",".join(f"{k}={v}" for k, v in view.configs.items())
    lines = [
        f"Topic: {view.topic}\tPartitionCount: {view.partition_count}\t"
        f"ReplicationFactor: {view.replication_factor}\tConfigs: {configs}"
    ]
    for p in view.partitions:
        leos = ",".join(f"{r}={_dash(o)}" for r, o in p.log_end_offsets.items())
        lines.append(
            f"\tTopic: {view.topic}\tPartition: {p.partition}\t"
            f"Leader: {'none' if p.leader is None else p.leader}\t"
            f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}\t"
            f"LeaderEpoch: {_dash(p.leader_epoch)}\tHW: {_dash(p.high_watermark)}\tLEO: {leos}"
        )
    return lines


@app.command()
def describe(
    ctx: typer.Context,
    names: Annotated[
        list[str] | None,
        typer.Argument(help="Topic names [default: every topic].", show_default=False),
    ] = None,
    json_out: JsonOption = False,
    under_replicated: Annotated[
        bool,
        typer.Option("--under-replicated-partitions", help="Only partitions with ISR < replicas."),
    ] = False,
    under_min_isr: Annotated[
        bool,
        typer.Option(
            "--under-min-isr-partitions", help="Only partitions with ISR < min.insync.replicas."
        ),
    ] = False,
    at_min_isr: Annotated[
        bool,
        typer.Option(
            "--at-min-isr-partitions", help="Only partitions with ISR = min.insync.replicas."
        ),
    ] = False,
    unavailable: Annotated[
        bool, typer.Option("--unavailable-partitions", help="Only partitions without a leader.")
    ] = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
    properties: PropertyOption = None,
) -> None:
    """Describe topics as kafka-topics.sh --describe, plus leader epoch, HW and LEOs."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    admin = _admin(settings, properties)
    metadata = _metadata(admin, names[0] if names and len(names) == 1 else None)
    wanted = sorted(names) if names else sorted(metadata.topics)
    filters = {
        "under_replicated": under_replicated,
        "under_min_isr": under_min_isr,
        "at_min_isr": at_min_isr,
        "unavailable": unavailable,
    }
    views = []
    for name in wanted:
        view = _describe_one(admin, metadata, name)
        view.partitions = [
            p for p in view.partitions if _keep(p, view.min_insync_replicas, filters)
        ]
        views.append(view)
    _print_views(settings.terminal, views, json_out, filtered=any(filters.values()))


def _print_views(
    terminal: Terminal, views: list[TopicView], json_out: bool, filtered: bool
) -> None:
    if json_out:
        documents = [v.as_json() for v in views]
        terminal.json(documents[0] if len(documents) == 1 else documents)
        return
    for view in views:
        if filtered and not view.partitions:
            continue
        lines = _text(view)
        terminal.lines(lines[1:] if filtered else lines)  # Kafka drops the topic line too
