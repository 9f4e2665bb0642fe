"""``rlog tui``: the command. Textual is imported only when the command runs, so the rest of
the CLI starts as fast as before."""

from __future__ import annotations

from typing import Annotated

import typer

from rlog.cli.discovery import BootstrapOption, DataDirOption, settings_of


def tui(
    ctx: typer.Context,
    interval: Annotated[
        float,
        typer.Option("--interval", min=0.1, help="Seconds between refreshes."),
    ] = 1.0,
    bootstrap: BootstrapOption = None,
    data_dir: DataDirOption = None,
) -> None:
    """A live dashboard: brokers (state, pid, CPU, RSS, leaderships), partitions (leader,
    epoch, replicas and ISR, HW, the LSO where a transaction holds it below the HW, each
    replica's LEO and lag), consumer groups, records/s in and out per broker, the event
    journal, and transactions (state, coordinator, producer id and epoch, age, partitions).

    Partition marks (the ? key shows them as drawn): in REPLICAS, "2!" (red) is a replica
    out of the ISR, and 2 with a cross (purple) one whose broker is offline: paused, down or
    restarting as rlogd says, or fenced by the controller. LEADER "none" (red): no leader;
    "2 paused" (purple): the leader is offline but not yet replaced (the controller fences a
    paused broker only when its session expires). A yellow ISR changed in the last 5 s and
    says how after it: an arrow down and 2 when broker 2 left it, an arrow up when it came
    back. A yellow LEADER is a new one.

    Keys: k kill, p pause, r resume, s restart the selected process (k asks first: y kills it
    as a crash the restart policy repairs, d keeps it down until s); c create a topic; 1-5
    switch tabs; ? help; q quit."""
    from rlog.cli.tui.app import RlogTui  # Textual loads only here
    from rlog.cli.tui.sources import ClusterActions, Collector

    settings = settings_of(ctx).override(bootstrap, data_dir)
    collector = Collector(settings)
    app = RlogTui(
        collector.collect,
        ClusterActions(settings),
        interval_s=interval,
        title="rlog",
        sub_title=str(settings.data_dir),
    )
    try:
        app.run()
    finally:
        collector.close()
