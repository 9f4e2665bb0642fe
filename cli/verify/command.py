"""``rlog verify``: run a checked workload against a cluster, under a nemesis, and judge it.

Producers write unique values with the chosen acks / idempotence / transactions, a consumer
group reads them with manual commits, a nemesis breaks the cluster (rlog clusters only), then
everything heals, a drain reads each partition to its end, and the checker names what went
wrong. The verdict table goes to stdout (``--json``: the verdict as JSON), progress to stderr,
the history to ``--history`` as JSON lines. Exit 0: nothing the settings promise was broken;
10: something was; other codes: the run itself could not be made.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from rlog.cli.discovery import (
    BootstrapOption,
    DataDirOption,
    check_reachable,
    client_config,
    control_request,
    resolve_bootstrap,
    running_cluster,
    settings_of,
)
from rlog.cli.produce import Acks
from rlog.cli.terminal import CliError, ExitCode, parse_properties
from rlog.cli.verify.scenarios import SCENARIOS, Nemesis

if TYPE_CHECKING:
    from rlog.cli.verify.verdict import Verdict


def verify(
    ctx: typer.Context,
    seconds: Annotated[
        float, typer.Option("--seconds", min=1.0, help="How long the workload and nemesis run.")
    ] = 30.0,
    seed: Annotated[
        int | None,
        typer.Option(
            "--seed",
            help="Decides the nemesis' faults and the producers' partitions (printed when "
            "left out, so a run can be repeated).",
            show_default=False,
        ),
    ] = None,
    scenario: Annotated[
        str,
        typer.Option(
            "--scenario",
            help="The nemesis: " + ", ".join(SCENARIOS) + " (all but none need an rlog cluster).",
        ),
    ] = "none",
    acks: Annotated[Acks, typer.Option("--acks", help="The producers' acks.")] = Acks.ALL,
    idempotent: Annotated[
        bool,
        typer.Option("--idempotent/--no-idempotent", help="The producers' enable.idempotence."),
    ] = False,
    transactional: Annotated[
        bool,
        typer.Option(
            "--transactional",
            help="Send in transactions (1-4 sends each, one in ten aborted) and read "
            "read_committed.",
        ),
    ] = False,
    topic: Annotated[
        str | None,
        typer.Option(
            "--topic", help="The topic to create [default: verify-SEED-N].", show_default=False
        ),
    ] = None,
    partitions: Annotated[
        int, typer.Option("--partitions", min=1, help="The topic's partitions.")
    ] = 3,
    replication_factor: Annotated[
        int, typer.Option("--replication-factor", min=1, help="The topic's replication factor.")
    ] = 3,
    min_insync_replicas: Annotated[
        int,
        typer.Option(
            "--min-insync-replicas",
            min=1,
            help="The topic's min.insync.replicas; with acks=all, 2 or more promises that no "
            "acknowledged write is lost.",
        ),
    ] = 2,
    producers: Annotated[
        int, typer.Option("--producers", min=1, help="Producer clients, each its own thread.")
    ] = 2,
    consumers: Annotated[
        int, typer.Option("--consumers", min=1, help="Members of the consumer group.")
    ] = 2,
    history: Annotated[
        Path | None,
        typer.Option(
            "--history",
            help="Where to write the history as JSON lines [default: TOPIC.jsonl here].",
            show_default=False,
            dir_okay=False,
        ),
    ] = None,
    properties: Annotated[
        list[str] | None,
        typer.Option(
            "-X",
            help="A client property key=value for every client (repeatable).",
            show_default=False,
        ),
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the verdict as JSON.")] = False,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """Run producers and a consumer group against the cluster while a nemesis breaks it, then
    check the history for lost, duplicated, reordered and aborted reads, as Jepsen does."""
    # The workload, the checkers and the report load when a run starts, not with every command.
    from rlog.cli.verify.history import write_jsonl
    from rlog.cli.verify.run import RunSettings, VerifyError, execute
    from rlog.cli.verify.verdict import render_table

    settings = settings_of(ctx).override(bootstrap=bootstrap, data_dir=data_dir)
    terminal = settings.terminal
    if scenario not in SCENARIOS:
        raise CliError(
            f"--scenario must be one of {', '.join(SCENARIOS)}, not {scenario!r}", ExitCode.USAGE
        )
    if transactional and acks is not Acks.ALL:
        raise CliError(
            "--transactional needs --acks all (transactions are idempotent)", ExitCode.USAGE
        )
    if idempotent and acks is not Acks.ALL:
        raise CliError("--idempotent needs --acks all, as enable.idempotence does", ExitCode.USAGE)
    seed = seed if seed is not None else random.randrange(1_000_000)
    topic = topic or f"verify-{seed}-{random.randrange(16**6):06x}"
    extra = parse_properties(properties or [])
    address = resolve_bootstrap(settings)
    check_reachable(address, settings.timeout_s)

    def progress(line: str) -> None:
        print(f"verify: {line}", file=sys.stderr, flush=True)

    def base_config(role: str) -> dict[str, Any]:
        return client_config(settings, address, {}, role=role)

    make_nemesis = None
    if scenario != "none":
        state = running_cluster(settings.data_dir)
        if state is None:
            raise CliError(
                f"--scenario {scenario} breaks an rlog cluster through its rlogd, and none runs "
                f"in {settings.data_dir}; against another Kafka use --scenario none",
                ExitCode.NOT_RUNNING,
            )
        brokers = [b.name for b in state.brokers]
        session_s = _session_timeout_s(state.config)

        def make_nemesis(leader_of: Any) -> Nemesis:
            return Nemesis(
                scenario=scenario,
                seed=seed,
                apply=lambda request: control_request(settings, request, 60.0),
                leader_of=leader_of,
                partitions=partitions,
                brokers=brokers,
                session_timeout_s=session_s,
                report=lambda line: progress(f"nemesis: {line}"),
            )

    run = RunSettings(
        topic=topic,
        seconds=seconds,
        seed=seed,
        scenario=scenario,
        acks=str(acks),
        idempotent=idempotent,
        transactional=transactional,
        producers=producers,
        consumers=consumers,
        partitions=partitions,
        replication_factor=replication_factor,
        min_insync_replicas=min_insync_replicas,
        properties=extra,
    )
    progress(
        f"seed {seed}, scenario {scenario}, {seconds:g} s, acks={acks}"
        + (", idempotent" if idempotent else "")
        + (", transactional" if transactional else "")
    )
    try:
        result = execute(run, base_config, make_nemesis, progress, settings.timeout_s)
    except VerifyError as error:
        raise CliError(str(error), ExitCode.FAILURE) from None
    path = history or Path(f"{topic}.jsonl")
    write_jsonl(path, result.history)
    progress(f"{len(result.history)} ops written to {path}; {result.faults} faults injected")
    for error in result.worker_errors:
        progress(f"a worker stopped early: {error}")
    if not result.drained:
        progress("the final drain did not reach every partition's end offset")
    if json_out:
        terminal.line(
            json.dumps(_verdict_json(result.verdict, seed, topic, str(path), result.faults))
        )
    else:
        terminal.line(render_table(result.verdict).rstrip("\n"))
    if not result.verdict.valid:
        raise typer.Exit(int(ExitCode.INVALID))


def _session_timeout_s(config_path: str | None) -> float:
    from rlog.daemon.config import ConfigError, load_config  # the config schema: only here

    try:
        config = load_config(Path(config_path) if config_path else None)
    except (ConfigError, OSError):
        return 9.0
    return config.broker.broker_session_timeout_ms / 1000


def _verdict_json(verdict: Verdict, seed: int, topic: str, history: str, faults: int) -> dict:
    return {
        "valid": verdict.valid,
        "seed": seed,
        "topic": topic,
        "history": history,
        "faults": faults,
        "promised": verdict.promises.describe(),
        "anomalies": {
            str(anomaly): {
                "count": report.count,
                "violations": report.violations,
                "examples": [finding.detail for finding in report.examples],
            }
            for anomaly, report in verdict.anomalies.items()
        },
        "summary": {
            "sends": dict(verdict.summary.sends),
            "polls": verdict.summary.polls,
            "reads": verdict.summary.reads,
            "values_read": verdict.summary.values_read,
            "commits": dict(verdict.summary.commits),
            "transactions": dict(verdict.summary.transactions),
            "unseen": {str(p): n for p, n in verdict.summary.unseen.items()},
        },
        "notes": list(verdict.notes),
    }
