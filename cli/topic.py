"""``rlog topic create|list|describe|delete|elect-leaders|trim``, in kafka-topics.sh's words.

``describe`` prints kafka-topics.sh ``--describe`` lines and adds what it does not show: the
offline replicas and why (fenced by the controller, or paused or down as rlogd says, which it
knows before the controller does), the leader epoch, the last stable offset (LSO: below it no
transaction is open; read_committed consumers read up to it), the high watermark and each
replica's log end offset and lag (asked with rlog's own wire client, see
:mod:`rlog.cli.replicas`). ``elect-leaders`` is kafka-leader-election.sh; ``trim`` is
kafka-delete-records.sh (rpk's trim-prefix).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated, Any

import typer
from confluent_kafka import OFFSET_END, KafkaException, TopicPartition
from confluent_kafka.admin import (
    ConfigResource,
    ConfigSource,
    NewTopic,
    OffsetSpec,
    ResourceType,
)

from rlog.cli import replicas
from rlog.cli.admin import Admin, JsonOption, PropertyOption, open_admin
from rlog.cli.consume import timestamp_ms as consume_timestamp_ms
from rlog.cli.discovery import (
    BootstrapOption,
    DataDirOption,
    Settings,
    check_reachable,
    kafka_error,
    resolve_bootstrap,
    settings_of,
    wire_tls,
)
from rlog.cli.terminal import CliError, ExitCode, Terminal, parse_properties

app = typer.Typer(
    help="Create, list, describe and delete topics, and elect their leaders.", no_args_is_help=True
)


@app.command(no_args_is_help=True)
def create(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Topic name.", show_default=False)],
    partitions: Annotated[
        int,
        typer.Option(
            "--partitions", "-p", min=-1, help="Partitions; -1 for the brokers' num.partitions."
        ),
    ] = 1,
    replication_factor: Annotated[
        int,
        typer.Option(
            "--replication-factor",
            "-r",
            min=-1,
            help="Replicas of each partition; -1 for the brokers' default.replication.factor.",
        ),
    ] = 1,
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
    """Create a topic. -1 for --partitions or --replication-factor leaves it to the brokers
    (CreateTopics with -1, as kafka-topics.sh sends without the flag)."""
    # 0 is neither a count nor "the brokers' default": refuse it here, in the flag's words.
    for flag, value in (("--partitions", partitions), ("--replication-factor", replication_factor)):
        if value == 0:
            raise CliError(
                f"{flag} must be at least 1, or -1 for the brokers' default", ExitCode.USAGE
            )
    settings = settings_of(ctx).override(bootstrap, data_dir)
    configs = parse_properties(config or [], flag="--config")
    admin = open_admin(settings, properties)
    new_topic = NewTopic(
        name, num_partitions=partitions, replication_factor=replication_factor, config=configs
    )
    futures = admin.client.create_topics([new_topic], request_timeout=settings.timeout_s)
    try:
        admin.result(futures[name], "create topic", name)
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
    admin = open_admin(settings, properties)
    futures = admin.client.delete_topics([name], request_timeout=settings.timeout_s)
    try:
        admin.result(futures[name], "delete topic", name)
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
    admin = open_admin(settings, properties)
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
    leader: int  # -1: no leader (offline)
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline: dict[str, str]  # replica id -> why it is offline: paused, down, fenced, ...
    high_watermark: int | None
    last_stable_offset: int | None
    log_start_offset: int | None
    log_end_offsets: dict[str, int | None]  # replica id -> its LEO, None when not known

    @property
    def online(self) -> bool:
        return self.leader >= 0

    @property
    def available(self) -> bool:
        """Kafka's TopicCommand: a leader, and one among the live brokers."""
        return self.online and str(self.leader) not in self.offline

    def lags(self) -> dict[str, int | None]:
        """Each replica's lag behind the leader: leader LEO - replica LEO."""
        leader_end = self.log_end_offsets.get(str(self.leader)) if self.online else None
        return {
            replica: None if leader_end is None or end is None else leader_end - end
            for replica, end in self.log_end_offsets.items()
        }

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
    entries = admin.result(futures[resource], "describe configs", topic)
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


def _wire(settings: Settings) -> replicas.WireCluster:
    bootstrap = resolve_bootstrap(settings)
    check_reachable(bootstrap, settings.timeout_s)
    return replicas.WireCluster(bootstrap, settings.timeout_s, wire_tls(settings))


def _partition_views(
    partitions: list[replicas.Partition],
    offsets: replicas.ReplicaOffsets,
    states: dict[int, str],
) -> list[PartitionView]:
    views = []
    for p in partitions:
        key = (p.topic, p.partition)
        offline = replicas.offline_reasons(p.replicas, p.offline_replicas, states)
        views.append(
            PartitionView(
                partition=p.partition,
                leader=p.leader if p.leader >= 0 else replicas.NO_LEADER,
                leader_epoch=p.leader_epoch,
                replicas=p.replicas,
                isr=p.isr,
                offline={str(r): reason for r, reason in offline.items()},
                high_watermark=offsets.high_watermarks[key],
                last_stable_offset=offsets.last_stable_offsets.get(key),
                log_start_offset=offsets.log_start_offsets[key],
                log_end_offsets={str(r): o for r, o in offsets.log_end_offsets[key].items()},
            )
        )
    return views


def _answering(
    settings: Settings,
    processes: dict[int, replicas.BrokerProcess],
    avoid: set[tuple[str, int]],
) -> Settings:
    """The settings with only running brokers to bootstrap from, when rlogd says some are not:
    the configs' AdminClient then starts at one that answers."""
    up = [
        b.address for b in sorted(processes.values(), key=lambda b: b.id) if b.address not in avoid
    ]
    if not avoid or not up:
        return settings
    return settings.override(",".join(f"{host}:{port}" for host, port in up))


def _describe_all(
    settings: Settings, properties: list[str] | None, names: list[str] | None
) -> list[TopicView]:
    """Metadata and offsets through rlog's wire client, configs through an AdminClient, and
    each broker process's state from rlogd when its control socket answers."""
    processes = replicas.rlogd_processes(settings) or {}
    states = {b.id: b.state for b in processes.values()}
    cluster = _wire(settings)
    cluster.avoid = {b.address for b in processes.values() if b.state in replicas.PROCESS_REASONS}
    try:
        metadata = replicas.fetch_metadata(cluster, sorted(set(names)) if names else None)
        found = {t["name"]: replicas.partitions_of(t) for t in metadata["topics"]}
        wanted = sorted(set(names)) if names else sorted(found)
        missing = [name for name in wanted if name not in found]
        if missing:
            raise CliError(f"unknown topic '{missing[0]}'", ExitCode.NOT_FOUND)
        every = [p for name in wanted for p in found[name]]
        offsets = replicas.replica_offsets(cluster, every, stable=True)
    finally:
        cluster.close()
    admin = (
        open_admin(_answering(settings, processes, cluster.avoid), properties) if wanted else None
    )
    views = []
    for name in wanted:
        assert admin is not None
        configs, min_isr = _configs(admin, name)
        parts = _partition_views(found[name], offsets, states)
        factor = len(parts[0].replicas) if parts else 0
        views.append(TopicView(name, len(parts), factor, configs, min_isr, parts))
    return views


def _keep(view: PartitionView, min_isr: int, filters: dict[str, bool]) -> bool:
    if not any(filters.values()):
        return True
    checks = {
        "under_replicated": len(view.isr) < len(view.replicas),
        "under_min_isr": len(view.isr) < min_isr,
        "at_min_isr": len(view.isr) == min_isr,
        "unavailable": not view.available,
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
        offline = ",".join(f"{r}({why})" for r, why in p.offline.items())
        lags = ",".join(f"{r}={_dash(lag)}" for r, lag in p.lags().items())
        lines.append(
            f"\tTopic: {view.topic}\tPartition: {p.partition}\t"
            f"Leader: {p.leader if p.online else 'none'}\t"
            f"Replicas: {','.join(map(str, p.replicas))}\tIsr: {','.join(map(str, p.isr))}\t"
            f"Offline: {offline}\t"
            f"LeaderEpoch: {p.leader_epoch if p.leader_epoch >= 0 else '-'}\t"
            f"LSO: {_dash(p.last_stable_offset)}\tHW: {_dash(p.high_watermark)}\t"
            f"LEO: {leos}\tLag: {lags}"
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
        bool,
        typer.Option(
            "--unavailable-partitions",
            help="Only partitions without a leader or whose leader is offline.",
        ),
    ] = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
    properties: PropertyOption = None,
) -> None:
    """Describe topics as kafka-topics.sh --describe, plus each partition's offline replicas,
    leader epoch, last stable offset (LSO) and high watermark (HW), and each replica's log end
    offset (LEO) and lag behind the leader.

    Offline lists the replicas whose broker is offline, with why: "fenced" when the controller
    does not count the broker live; "paused", "down", "restarting" or "starting" when rlogd
    says its process is not running (known only when the data dir's rlogd answers, and at
    once, while the controller still counts a paused broker live until its session expires).
    E.g. "Offline: 2(paused)"; empty when none; in JSON {"2": "paused"}.

    The LSO is the first offset of the oldest transaction still open (the HW when none is open):
    read_committed consumers read up to it, read_uncommitted ones up to the HW.

    LEOs are asked of each replica's own broker; a replica whose broker is down or offline
    shows "-" (null in JSON). A partition without a leader shows "Leader: none" (-1 in JSON).
    --unavailable-partitions shows those and the ones whose leader is offline."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    filters = {
        "under_replicated": under_replicated,
        "under_min_isr": under_min_isr,
        "at_min_isr": at_min_isr,
        "unavailable": unavailable,
    }
    views = _describe_all(settings, properties, names)
    for view in views:
        view.partitions = [
            p for p in view.partitions if _keep(p, view.min_insync_replicas, filters)
        ]
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


# -- elect-leaders ------------------------------------------------------------------------


def _election_scope(
    cluster: replicas.WireCluster, topic: str | None, partitions: list[int] | None
) -> dict[str, list[int]] | None:
    """ElectLeaders' topic_partitions: None for every partition, else checked to exist."""
    if topic is None:
        if partitions:
            raise CliError("--partition needs --topic", ExitCode.USAGE)
        return None
    metadata = replicas.fetch_metadata(cluster, [topic])
    known = [p.partition for t in metadata["topics"] for p in replicas.partitions_of(t)]
    unknown = sorted(set(partitions or []) - set(known))
    if unknown:
        raise CliError(f"unknown partition {topic}-{unknown[0]}", ExitCode.NOT_FOUND)
    return {topic: sorted(set(partitions)) if partitions else known}


def _election_line(result: replicas.ElectionResult, election: str) -> str:
    where = f"{result.topic}-{result.partition}"
    if result.error_code == 0:
        return f"{where}: leader elected ({election} election)"
    reason = f": {result.message}" if result.message else ""
    return f"{where}: {replicas.error_name(result.error_code)}{reason}"


@app.command("elect-leaders")
def elect_leaders(
    ctx: typer.Context,
    topic: Annotated[
        str | None,
        typer.Option(
            "--topic",
            metavar="TOPIC",
            help="Only this topic [default: every partition of every topic].",
        ),
    ] = None,
    partition: Annotated[
        list[int] | None,
        typer.Option(
            "--partition",
            metavar="PARTITION",
            min=0,
            help="Only this partition of --topic (repeatable).",
            show_default=False,
        ),
    ] = None,
    unclean: Annotated[
        bool,
        typer.Option(
            "--unclean",
            help="Unclean election: a partition without a live in-sync replica gets a live "
            "out-of-sync one as leader (records only the old ISR had are lost). Default: "
            "preferred election (the first replica leads again if it is in sync).",
        ),
    ] = False,
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Elect leaders as kafka-leader-election.sh: preferred (default) or unclean.

    Prints one line per partition. ELECTION_NOT_NEEDED (the leader already is the one the
    election would pick) is not an error; any other partition error makes the exit status 1."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    election = "unclean" if unclean else "preferred"
    cluster = _wire(settings)
    try:
        scope = _election_scope(cluster, topic, partition)
        results = replicas.elect_leaders(
            cluster, election, scope, timeout_ms=int(settings.timeout_s * 1000)
        )
    finally:
        cluster.close()
    terminal = settings.terminal
    if json_out:
        terminal.json({"election_type": election, "partitions": [r.as_json() for r in results]})
    elif not results:
        terminal.note("No election needed: every partition already has that kind of leader.")
    else:
        terminal.lines(_election_line(r, election) for r in results)
    if not all(r.ok for r in results):
        raise typer.Exit(int(ExitCode.FAILURE))


@dataclass(frozen=True)
class TrimPoint:
    """Where `trim --before` cuts: an offset, a time (the first record at or after it), or
    the high watermark (everything readable)."""

    kind: str  # offset | timestamp | end
    value: int = 0


def _trim_point(text: str, now_ms: int) -> TrimPoint:
    if text.isdigit():
        return TrimPoint("offset", int(text))
    if text.lower() in ("end", "hw"):
        return TrimPoint("end")
    if text.startswith("@"):
        try:
            return TrimPoint("timestamp", consume_timestamp_ms(text[1:], now_ms))
        except ValueError as exc:
            raise CliError(f"--before: {exc}", ExitCode.USAGE) from None
    raise CliError(
        f"--before: bad value {text!r} (an offset, @TIME as unix ms or -N(ms|s|m|h|d), or end)",
        ExitCode.USAGE,
    )


def _partitions_of(admin: Admin, topic: str) -> list[int]:
    found = _metadata(admin, topic).topics.get(topic)
    if found is None or found.error is not None:
        raise CliError(f"topic {topic} does not exist", ExitCode.NOT_FOUND)
    return sorted(found.partitions)


def _trim_offsets(
    admin: Admin, topic: str, partitions: list[int], point: TrimPoint
) -> dict[int, int]:
    """The offset to trim each partition before (-1: its high watermark)."""
    if point.kind == "offset":
        return dict.fromkeys(partitions, point.value)
    if point.kind == "end":
        return dict.fromkeys(partitions, OFFSET_END)
    spec = OffsetSpec.for_timestamp(point.value)
    futures = admin.client.list_offsets(
        {TopicPartition(topic, p): spec for p in partitions}, request_timeout=admin.timeout_s
    )
    found = {}
    for key, future in futures.items():
        offset = admin.result(future, "list offsets by time", topic).offset
        found[key.partition] = OFFSET_END if offset < 0 else offset  # no record that late
    return found


@app.command(no_args_is_help=True)
def trim(
    ctx: typer.Context,
    name: Annotated[str, typer.Argument(help="Topic name.", show_default=False)],
    before: Annotated[
        str,
        typer.Option(
            "--before",
            "-o",
            metavar="OFFSET|@TIME|end",
            help="Delete the records before this offset; before the first record at or after "
            "@TIME (unix ms, or -N(ms|s|m|h|d) ago); or 'end': everything below the high "
            "watermark.",
            show_default=False,
        ),
    ],
    partition: Annotated[
        list[int] | None,
        typer.Option(
            "--partition",
            "-p",
            min=0,
            help="Only this partition (repeatable) [default: every partition].",
            show_default=False,
        ),
    ] = None,
    json_out: JsonOption = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
    properties: PropertyOption = None,
) -> None:
    """Delete the oldest records of a topic (DeleteRecords, as kafka-delete-records.sh and
    rpk topic trim-prefix): each partition's log start moves forward on every replica, and
    consumers below it start over at the new log start.

    Prints each partition's new log start (its low watermark). A partition that refuses
    (an offset past its high watermark, a compacted topic) makes the exit status 1."""
    settings = settings_of(ctx).override(bootstrap, data_dir)
    point = _trim_point(before, int(time.time() * 1000))
    admin = open_admin(settings, properties)
    known = _partitions_of(admin, name)
    chosen = sorted(set(partition)) if partition else known
    unknown = [p for p in chosen if p not in known]
    if unknown:
        raise CliError(
            f"topic {name} has no partition {', '.join(map(str, unknown))} (it has {len(known)})",
            ExitCode.NOT_FOUND,
        )
    offsets = _trim_offsets(admin, name, chosen, point)
    futures = admin.client.delete_records(
        [TopicPartition(name, p, offsets[p]) for p in chosen],
        request_timeout=settings.timeout_s,
        operation_timeout=settings.timeout_s,
    )
    results: list[dict[str, Any]] = []
    for key, future in sorted(futures.items(), key=lambda item: item[0].partition):
        try:
            deleted = future.result(timeout=settings.timeout_s + 5)
            results.append({"partition": key.partition, "log_start_offset": deleted.low_watermark})
        except KafkaException as exc:
            error = exc.args[0]
            results.append({"partition": key.partition, "error": error.name(),
                            "message": error.str()})  # fmt: skip
    terminal = settings.terminal
    if json_out:
        terminal.json({"topic": name, "partitions": results})
    else:
        terminal.lines(
            f"{name}-{r['partition']}: log start offset now {r['log_start_offset']}"
            if "error" not in r
            else f"{name}-{r['partition']}: {r['error']}: {r['message']}"
            for r in results
        )
    if any("error" in r for r in results):
        raise typer.Exit(int(ExitCode.FAILURE))
