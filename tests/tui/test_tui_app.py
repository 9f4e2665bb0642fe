"""``rlog tui`` under Textual's Pilot: against real clusters started through rlogd (brokers,
partitions, the keys that kill and create, the event journal, a cluster going away and coming
back, an open transaction and its LSO), and against fixed snapshots for the 80x24 layout and
the snapshot pictures."""

from __future__ import annotations

import asyncio
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from rich.text import Text
from textual.pilot import Pilot
from textual.widget import Widget
from textual.widgets import DataTable, Input, RichLog, Sparkline, Static, TabbedContent

from rlog.cli.discovery import Settings
from rlog.cli.terminal import ColorMode, Terminal
from rlog.cli.tui import model
from rlog.cli.tui.app import RlogTui
from rlog.cli.tui.screens import CreateTopicScreen, KillScreen
from rlog.cli.tui.snapshot import (
    BrokerTraffic,
    CommittedOffset,
    Event,
    GroupInfo,
    GroupMember,
    PartitionInfo,
    ProcessInfo,
    Snapshot,
    TransactionInfo,
)
from rlog.cli.tui.sources import ActionFailed, ClusterActions, Collector
from rlog.core.protocol.apis import SUPPORTED, ApiKey
from support.cluster import Cluster, start_cluster
from support.replication import CONFIG

ClusterFactory = Callable[..., Cluster]
SnapCompare = Callable[..., bool]
SIZE = (80, 24)
WAIT_S = 20.0  # the longest any single condition may take
# Killed brokers stay down (no restart) so the controller fences them and the ISR shrinks.
NO_RESTARTS = CONFIG.replace("[cluster]\n", '[cluster]\nrestart_policy = "never"\n', 1)


# -- helpers ----------------------------------------------------------------------------------


def run(body: Callable[[], Awaitable[None]], timeout_s: float = 45.0) -> None:
    """Run an async test body, bounded in time."""
    asyncio.run(asyncio.wait_for(body(), timeout_s))


async def wait_for(pilot: Pilot[None], what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if check():
            return
        await pilot.pause(0.1)
    app = pilot.app
    shown = ""
    if isinstance(app, RlogTui):
        rows = [
            " ".join(c.plain for c in cells)
            for _, cells in model.broker_rows(app.snapshot or Snapshot(0.0), {})
        ]
        shown = f"; status: {status(app)}; processes: {rows}"
    raise AssertionError(f"timed out after {WAIT_S} s waiting for {what}{shown}")


def settings_for(cluster: Cluster) -> Settings:
    # No bootstrap: found from the data dir's rlogd.json, as `rlog tui` does by default.
    return Settings(terminal=Terminal(color=ColorMode.NEVER), data_dir=cluster.data_dir)


def live_app(settings: Settings, interval_s: float = 0.3) -> tuple[RlogTui, Collector]:
    collector = Collector(settings)
    return RlogTui(collector.collect, ClusterActions(settings), interval_s=interval_s), collector


def table(app: RlogTui, selector: str) -> DataTable[object]:
    return app.query_one(selector, DataTable)


def cell(app: RlogTui, selector: str, row: str, column: str) -> str:
    found = table(app, selector)
    if row not in [key.value for key in found.rows]:
        return ""
    return str(found.get_cell(row, column))


def columns(app: RlogTui, selector: str) -> list[str]:
    return [str(column.label) for column in table(app, selector).columns.values()]


def row_keys(app: RlogTui, selector: str) -> list[str]:
    return [str(key.value) for key in table(app, selector).rows]


def shown_lines(app: RlogTui, selector: str) -> list[str]:
    """A table's lines as they are on screen: cut to its width, scrolled as it is."""
    found = table(app, selector)
    return [found.render_line(y).text for y in range(found.size.height)]


def shown_leo_cells(app: RlogTui, row: str, brokers: tuple[int, ...]) -> tuple[list[str], list]:
    """(the last cells of ``row`` as the screen shows them, its LEO cells as the table has
    them): equal when every broker's LEO is on screen, whole. Cells are two spaces apart."""
    found = table(app, "#partition-table")
    line = shown_lines(app, "#partition-table")[found.get_row_index(row) + 1]  # + the header
    cells = [str(found.get_cell(row, f"{b} LEO")) for b in brokers]
    return re.split(r"\s{2,}", line.strip())[-len(brokers) :], cells


def status(app: RlogTui) -> str:
    return str(app.query_one("#status", Static).render())


def event_text(app: RlogTui) -> str:
    return "\n".join(line.text for line in app.query_one("#event-log", RichLog).lines)


async def select_process(pilot: Pilot[None], app: RlogTui, name: str) -> None:
    brokers = table(app, "#brokers")
    brokers.focus()
    brokers.move_cursor(row=row_keys(app, "#brokers").index(name))
    await pilot.pause()
    assert app.selected_process() == name


# -- a live cluster ---------------------------------------------------------------------------


@pytest.mark.integration
def test_brokers_partitions_and_creating_a_topic(cluster_factory: ClusterFactory) -> None:
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    app, collector = live_app(settings_for(cluster))

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            names = ["controller", "broker-1", "broker-2", "broker-3"]
            await wait_for(pilot, "four processes", lambda: row_keys(app, "#brokers") == names)
            await wait_for(
                pilot,
                "pids of every process",
                lambda: all(cell(app, "#brokers", n, "PID").isdigit() for n in names),
            )
            for broker_id in (1, 2, 3):
                pid = cluster.broker_pid(broker_id)
                assert cell(app, "#brokers", f"broker-{broker_id}", "PID") == str(pid)
                assert cell(app, "#brokers", f"broker-{broker_id}", "STATE") == "running"

            # c opens the form; a bad count is shown in the form, which stays open.
            await pilot.press("c")
            await wait_for(pilot, "the form", lambda: isinstance(app.screen, CreateTopicScreen))
            app.screen.query_one("#name", Input).value = "orders"
            app.screen.query_one("#partitions", Input).value = "zero"
            await pilot.press("enter")
            error = str(app.screen.query_one("#form-error", Static).render())
            assert "partitions" in error and isinstance(app.screen, CreateTopicScreen)
            app.screen.query_one("#partitions", Input).value = "3"
            app.screen.query_one("#replication", Input).value = "3"
            await pilot.click("#create")
            await wait_for(pilot, "the form to close", lambda: app.screen is app.screen_stack[0])
            await wait_for(
                pilot, "the topic created", lambda: "Created topic orders" in status(app)
            )

            rows = ["orders-0", "orders-1", "orders-2"]
            await wait_for(
                pilot,
                "three partitions with leaders and full ISRs",
                lambda: (
                    row_keys(app, "#partition-table")[:3] == rows
                    and all(
                        cell(app, "#partition-table", r, "LEADER") in {"1", "2", "3"}
                        and len(cell(app, "#partition-table", r, "ISR").split(",")) == 3
                        and cell(app, "#partition-table", r, "HW") == "0"
                        for r in rows
                    )
                ),
            )
            leads = [cell(app, "#brokers", f"broker-{i}", "LEADS") for i in (1, 2, 3)]
            assert sum(map(int, leads)) == 3

            # Creating it again is an error in the status line, not a crash.
            await pilot.press("c")
            await wait_for(pilot, "the form", lambda: isinstance(app.screen, CreateTopicScreen))
            app.screen.query_one("#name", Input).value = "orders"
            await pilot.press("enter")
            await wait_for(pilot, "the refusal", lambda: "already exists" in status(app))

            # The brokers do not serve group APIs (yet): no groups, not an error.
            await pilot.press("2")
            assert "no consumer groups" in str(app.query_one("#groups-note", Static).render())
            assert "consumer groups:" not in status(app)

    try:
        run(body)
    finally:
        collector.close()


@pytest.mark.integration
def test_kill_shows_the_exit_and_the_replica_out_of_sync(cluster_factory: ClusterFactory) -> None:
    cluster = cluster_factory(brokers=3, config_text=NO_RESTARTS)
    settings = settings_for(cluster)
    ClusterActions(settings).create_topic("orders", 2, 3)
    app, collector = live_app(settings)
    old_pid = str(cluster.broker_pid(2))

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(
                pilot,
                "orders in sync",
                lambda: (
                    cell(app, "#partition-table", "orders-1", "REPLICAS") != ""
                    and "!" not in cell(app, "#partition-table", "orders-1", "REPLICAS")
                ),
            )
            await select_process(pilot, app, "broker-2")
            await pilot.press("k")
            await pilot.pause()
            await pilot.press("y")  # the confirmation
            await wait_for(
                pilot,
                "broker-2 down in the table",
                lambda: (
                    cell(app, "#brokers", "broker-2", "STATE") != "running"
                    and cell(app, "#brokers", "broker-2", "PID") != old_pid
                ),
            )
            await pilot.press("4")
            await wait_for(
                pilot,
                "the exit in the events panel",
                lambda: "process_exited" in event_text(app) and f"pid {old_pid}" in event_text(app),
            )
            # Fenced (rlogd tells the controller of the exit), so out of every ISR; marked "2✗"
            # (its broker is down), not "2!" (out of sync but online).
            await wait_for(
                pilot,
                "replica 2 marked offline and out of the ISR",
                lambda: all(
                    f"2{model.OFFLINE_MARK}" in cell(app, "#partition-table", r, "REPLICAS")
                    and "2" not in cell(app, "#partition-table", r, "ISR").split(",")
                    for r in ("orders-0", "orders-1")
                ),
            )
            assert "2!" not in cell(app, "#partition-table", "orders-0", "REPLICAS")
            assert "under-replicated" in status(app)

    try:
        run(body)
    finally:
        collector.close()


@pytest.mark.integration
def test_three_brokers_leos_fit_in_80_columns(cluster_factory: ClusterFactory) -> None:
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    settings = settings_for(cluster)
    topic = "payments-eu-west"  # a name as long as real ones: the LEO columns got cut off
    ClusterActions(settings).create_topic(topic, 2, 3)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(300):
        producer.produce(topic, value=b"%d" % i, partition=i % 2)
    assert producer.flush(15) == 0
    app, collector = live_app(settings)
    rows = [f"{topic}-0", f"{topic}-1"]

    def caught_up() -> bool:
        return all(
            str(cell(app, "#partition-table", row, f"{b} LEO")).startswith("150 ")
            for row in rows
            for b in (1, 2, 3)
        )

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, "every replica at offset 150", caught_up)
            header = shown_lines(app, "#partition-table")[0]
            assert re.split(r"\s{2,}", header.strip())[-3:] == ["1 LEO", "2 LEO", "3 LEO"]

            def whole_on_screen() -> bool:
                # A refresh that narrows the bars redraws the columns on a later idle: wait
                # for the screen to settle; a column cut off never does.
                return all(
                    shown == cells
                    for shown, cells in (shown_leo_cells(app, row, (1, 2, 3)) for row in rows)
                )

            try:
                await wait_for(pilot, "every LEO cell whole on screen", whole_on_screen)
            except AssertionError:
                for row in rows:
                    shown, cells = shown_leo_cells(app, row, (1, 2, 3))
                    assert shown == cells, f"{row}: {shown} on screen, {cells} in the table"
                raise

    try:
        run(body)
    finally:
        collector.close()


@pytest.mark.integration
def test_kill_asks_whether_the_broker_stays_down(cluster_factory: ClusterFactory) -> None:
    # "always" restarts any exit after 200 ms: only d (stay down) keeps the broker down.
    always = CONFIG.replace("[cluster]\n", '[cluster]\nrestart_policy = "always"\n', 1)
    cluster = cluster_factory(brokers=2, config_text=always)
    app, collector = live_app(settings_for(cluster))

    def state() -> str:
        return cell(app, "#brokers", "broker-2", "STATE")

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, "broker-2 running", lambda: state() == "running")
            await select_process(pilot, app, "broker-2")
            old_pid = cell(app, "#brokers", "broker-2", "PID")
            await pilot.press("k")  # the dialog asks which; n cancels
            await pilot.pause()
            assert isinstance(app.screen, KillScreen)
            await pilot.press("n")
            await pilot.pause()
            assert app.screen is app.screen_stack[0] and "kill" not in status(app)
            await pilot.press("k")
            await pilot.pause()
            await pilot.press("d")  # stay down
            await wait_for(
                pilot,
                "broker-2 failed with no pid",
                lambda: state() == "failed" and cell(app, "#brokers", "broker-2", "PID") == "-",
            )
            assert "staying down until rlog chaos restart broker-2" in status(app)
            await pilot.pause(1.5)  # many backoffs: the policy would have restarted it
            assert state() == "failed" and cluster.status()["brokers"][1]["pid"] is None
            await pilot.press("s")  # restart starts it
            await pilot.pause()
            await pilot.press("y")
            await wait_for(
                pilot,
                "broker-2 running with a new pid",
                lambda: (
                    state() == "running"
                    and cell(app, "#brokers", "broker-2", "PID") not in {old_pid, "-"}
                ),
            )
            # y kills as a crash: the policy restarts it.
            running_pid = cell(app, "#brokers", "broker-2", "PID")
            await pilot.press("k")
            await pilot.pause()
            await pilot.press("y")
            await wait_for(
                pilot, "the kill answered", lambda: "restart policy always" in status(app)
            )
            await wait_for(
                pilot,
                "broker-2 restarted by the policy",
                lambda: (
                    state() == "running"
                    and cell(app, "#brokers", "broker-2", "PID") not in {running_pid, "-"}
                ),
            )

    try:
        run(body, timeout_s=90)
    finally:
        collector.close()


@pytest.mark.integration
def test_pause_resume_and_restart_keys(cluster_factory: ClusterFactory) -> None:
    cluster = cluster_factory(brokers=3, config_text=CONFIG)
    app, collector = live_app(settings_for(cluster))

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, "brokers", lambda: "broker-3" in row_keys(app, "#brokers"))
            await select_process(pilot, app, "broker-3")
            await pilot.press("p")  # no confirmation for pause and resume
            await wait_for(
                pilot, "paused", lambda: cell(app, "#brokers", "broker-3", "STATE") == "paused"
            )
            # A refresh with a broker that cannot answer stays short: each source (partitions
            # with their LSOs, transactions, groups) gives it one short timeout.
            probe = Collector(settings_for(cluster))
            try:
                started = time.monotonic()
                paused = await asyncio.to_thread(probe.collect)
                assert time.monotonic() - started < 6 * probe.timeout_s
            finally:
                probe.close()
            assert not [e for e in paused.errors if "transactions" in e], paused.errors
            await pilot.press("r")
            await wait_for(
                pilot, "running", lambda: cell(app, "#brokers", "broker-3", "STATE") == "running"
            )
            # s restarts it after a confirmation (n keeps it): it comes back with a new pid.
            old_pid = cell(app, "#brokers", "broker-3", "PID")
            await pilot.press("s")
            await pilot.pause()
            await pilot.press("n")
            await pilot.pause()
            assert app.screen is app.screen_stack[0] and "restart" not in status(app)
            await pilot.press("s")
            await pilot.pause()
            await pilot.press("y")
            await wait_for(
                pilot,
                "broker-3 running with a new pid",
                lambda: (
                    cell(app, "#brokers", "broker-3", "STATE") == "running"
                    and cell(app, "#brokers", "broker-3", "PID") not in {old_pid, "-"}
                ),
            )

    try:
        run(body)
    finally:
        collector.close()


@pytest.mark.integration
def test_cluster_going_away_is_a_status_line_and_coming_back_recovers(tmp_path: Path) -> None:
    data_dir = tmp_path / "cluster"
    started = [start_cluster(data_dir, 1)]
    settings = Settings(terminal=Terminal(color=ColorMode.NEVER), data_dir=data_dir)
    app, collector = live_app(settings)

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, "broker-1", lambda: "broker-1" in row_keys(app, "#brokers"))
            await asyncio.to_thread(started[0].stop)
            await wait_for(pilot, "the not-running line", lambda: "not running" in status(app))
            assert app.is_running
            # Up again in the same data dir (on other ports): found through rlogd.json.
            started.append(await asyncio.to_thread(start_cluster, data_dir, 1))
            pid = str(started[-1].broker_pid(1))
            await wait_for(
                pilot,
                "the new broker",
                lambda: (
                    cell(app, "#brokers", "broker-1", "PID") == pid
                    and "not running" not in status(app)
                ),
            )

    try:
        run(body)
    finally:
        collector.close()
        for cluster in started:
            cluster.stop()


def read_available(fd: int, seconds: float) -> bytes:
    """What a pty's program writes during ``seconds`` (less if it closes the pty)."""
    out = b""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.1)
        if ready:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # the program exited and closed its side
                break
            if not chunk:
                break
            out += chunk
    return out


@pytest.mark.integration
def test_the_rlog_tui_command_runs_in_a_terminal_and_q_quits(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(brokers=1)
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", SIZE[1], SIZE[0], 0, 0))
    env = {k: v for k, v in os.environ.items() if not k.startswith("RLOG_")}
    env.update(TERM="xterm-256color", RLOG_DATA_DIR=str(cluster.data_dir))
    process = subprocess.Popen(
        [sys.executable, "-m", "rlog.cli.app", "tui", "--interval", "0.5"],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        env=env,
        start_new_session=True,
    )
    os.close(terminal)
    try:
        shown = b""
        deadline = time.monotonic() + WAIT_S
        while b"broker-1" not in shown and time.monotonic() < deadline:
            shown += read_available(controller, 0.5)
        assert b"broker-1" in shown, shown[-2000:]
        os.write(controller, b"q")
        assert process.wait(timeout=WAIT_S) == 0
        shown += read_available(controller, 0.5)
        assert b"Traceback" not in shown
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        os.close(controller)


GROUP_APIS = ApiKey.FIND_COORDINATOR in SUPPORTED and ApiKey.LIST_GROUPS in SUPPORTED


@pytest.mark.integration
@pytest.mark.skipif(not GROUP_APIS, reason="the brokers do not serve the group APIs yet")
def test_a_real_consumer_group_shows_with_its_lag(cluster_factory: ClusterFactory) -> None:
    cluster = cluster_factory(brokers=1)
    settings = settings_for(cluster)
    # Two partitions, records in the first only: the member owns both and commits only the
    # first, so the second shows as the CLI shows it, owned with no commit yet.
    ClusterActions(settings).create_topic("events", 2, 1)
    producer = Producer({"bootstrap.servers": cluster.bootstrap})
    for i in range(10):
        producer.produce("events", value=b"%d" % i, partition=0)
    assert producer.flush(15) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "tui-group",
            "client.id": "tui-test-consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    app, collector = live_app(settings)
    try:
        consumer.subscribe(["events"])
        read = []
        deadline = time.monotonic() + WAIT_S
        while len(read) < 4 and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                read.append(message)
        assert len(read) == 4, "the consumer got no records"
        consumer.commit(message=read[-1], asynchronous=False)  # committed offset 4 of 10

        async def body() -> None:
            async with app.run_test(size=SIZE) as pilot:
                await pilot.press("2")
                row = "tui-group/events-0"
                await wait_for(
                    pilot,
                    "the group with its committed offset and lag",
                    lambda: (
                        cell(app, "#group-table", row, "COMMITTED") == "4"
                        and cell(app, "#group-table", row, "END") == "10"
                        and cell(app, "#group-table", row, "LAG") == "6"
                        and cell(app, "#group-table", row, "MEMBERS") == "1"
                    ),
                )
                assert cell(app, "#group-table", row, "OWNER") == "tui-test-consumer"
                owned = "tui-group/events-1"
                assert [
                    cell(app, "#group-table", owned, column)
                    for column in ("COMMITTED", "END", "LAG", "OWNER")
                ] == ["-", "0", "-", "tui-test-consumer"]

        run(body)
    finally:
        consumer.close()
        collector.close()


@pytest.mark.integration
def test_an_open_transaction_shows_ongoing_and_holds_the_lso_until_committed(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(brokers=1)
    settings = settings_for(cluster)
    ClusterActions(settings).create_topic("payments", 1, 1)
    plain = Producer({"bootstrap.servers": cluster.bootstrap})
    plain.produce("payments", value=b"before", partition=0)
    assert plain.flush(15) == 0
    tid = "tui-payer"
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "transactional.id": tid})
    producer.init_transactions(30)
    producer.begin_transaction()
    for value in (b"t1", b"t2"):
        producer.produce("payments", value=value, partition=0)
    assert producer.flush(15) == 0  # written at offsets 1 and 2, not committed
    app, collector = live_app(settings)
    row = "payments-0"

    def txn_cell(column: str) -> str:
        return cell(app, "#txn-table", tid, column)

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            # The LSO stays at the open transaction's first offset, below the HW.
            await wait_for(
                pilot,
                "the LSO held back below the HW",
                lambda: (
                    cell(app, "#partition-table", row, "HW") == "3"
                    and cell(app, "#partition-table", row, "LSO") == "1"
                ),
            )
            await pilot.press("5")
            await wait_for(
                pilot,
                "the transaction Ongoing with its partition",
                lambda: txn_cell("STATE") == "Ongoing" and txn_cell("PARTITIONS") == row,
            )
            assert app.query_one(TabbedContent).active == "transactions"
            assert txn_cell("COORD") == "1"
            assert txn_cell("PRODUCER").isdigit() and txn_cell("EPOCH").isdigit()
            assert txn_cell("AGE").endswith("s")
            state = table(app, "#txn-table").get_cell(tid, "STATE")
            assert isinstance(state, Text) and state.style == model.TXN_STATE_STYLES["Ongoing"]
            assert "1 open" in str(app.query_one("#txn-note", Static).render())

            await asyncio.to_thread(producer.commit_transaction, 15)
            await wait_for(
                pilot,
                "CompleteCommit and the LSO caught up with the HW (after the marker)",
                lambda: (
                    txn_cell("STATE") == "CompleteCommit"
                    and cell(app, "#partition-table", row, "HW") == "4"
                    and "LSO" not in columns(app, "#partition-table")
                ),
            )
            assert app.snapshot is not None
            (payments,) = (p for p in app.snapshot.partitions if p.topic == "payments")
            assert payments.last_stable_offset == payments.high_watermark == 4
            assert txn_cell("AGE") == "-" and "0 open" in str(
                app.query_one("#txn-note", Static).render()
            )

    try:
        run(body, timeout_s=60)
    finally:
        collector.close()


# Sessions long enough that a paused leader stays leader until resumed: only rlogd knows.
LONG_SESSIONS = CONFIG.replace(
    '"broker.session.timeout.ms" = 3000', '"broker.session.timeout.ms" = 60000'
)


def style_of(app: RlogTui, row: str, column: str) -> str:
    found = table(app, "#partition-table").get_cell(row, column)
    return str(found.style) if isinstance(found, Text) else ""


@pytest.mark.integration
def test_a_paused_leader_and_a_killed_follower_are_marked_as_they_happen(
    cluster_factory: ClusterFactory,
) -> None:
    cluster = cluster_factory(brokers=3, config_text=LONG_SESSIONS)
    settings = settings_for(cluster)
    ClusterActions(settings).create_topic("orders", 1, 3)
    app, collector = live_app(settings)
    row = "orders-0"

    def leader() -> str:
        return cell(app, "#partition-table", row, "LEADER")

    def isr() -> str:
        return cell(app, "#partition-table", row, "ISR")

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(
                pilot,
                "orders-0 led, its ISR full and unmarked",
                lambda: (
                    leader() in {"1", "2", "3"}
                    and sorted(isr().split(",")) == ["1", "2", "3"]
                    and style_of(app, row, "ISR") == ""
                ),
            )
            led_by = leader()
            await select_process(pilot, app, f"broker-{led_by}")
            await pilot.press("p")
            # rlogd says paused at once; the controller would wait a minute to fence it.
            await wait_for(
                pilot,
                "the leader marked paused",
                lambda: (
                    leader() == f"{led_by} paused"
                    and f"{led_by}{model.OFFLINE_MARK}"
                    in cell(app, "#partition-table", row, "REPLICAS")
                ),
            )
            assert style_of(app, row, "LEADER") == model.OFFLINE_STYLE
            assert "1 leader offline" in status(app)
            await pilot.press("r")
            await wait_for(pilot, "the leader unmarked", lambda: leader() == led_by)
            assert model.OFFLINE_MARK not in cell(app, "#partition-table", row, "REPLICAS")

            # A killed follower: rlogd tells the controller, which fences it at once; it comes
            # back within about a second. The ISR cell keeps both changes for a few seconds.
            follower = next(b for b in ("1", "2", "3") if b != led_by)
            await select_process(pilot, app, f"broker-{follower}")
            await pilot.press("k")
            await pilot.pause()
            await pilot.press("y")
            await wait_for(
                pilot,
                f"the shrink marked ↓{follower}",
                lambda: f"{model.SHRUNK}{follower}" in isr(),
            )
            assert style_of(app, row, "ISR") == model.CHANGED_STYLE
            await wait_for(
                pilot,
                f"the ISR whole again, marked ↓{follower}↑{follower}",
                lambda: isr().endswith(f"{model.SHRUNK}{follower}{model.EXPANDED}{follower}"),
            )
            await wait_for(
                pilot,
                "the marks gone a few seconds later",
                lambda: sorted(isr().split(",")) == ["1", "2", "3"],
            )
            assert style_of(app, row, "ISR") == ""

    try:
        run(body, timeout_s=90)
    finally:
        collector.close()


# -- a fixed snapshot: layout and pictures ----------------------------------------------------

FIXED = Snapshot(
    taken_at=100.0,
    processes=(
        ProcessInfo("controller", "controller", None, 4100, "running", 1.0, 31 * 2**20, 65.0),
        ProcessInfo("broker-1", "broker", 1, 4101, "running", 12.0, 40 * 2**20, 65.0),
        ProcessInfo("broker-2", "broker", 2, None, "stopped", None, None, None, 1),
        ProcessInfo("broker-3", "broker", 3, 4103, "paused", 0.0, 41 * 2**20, 300.0),
    ),
    partitions=(
        PartitionInfo("orders", 0, 1, 3, (1, 2, 3), (1, 3), 120, ((1, 150), (2, 80), (3, 150))),
        PartitionInfo("orders", 1, 3, 2, (2, 3, 1), (3, 1), 90, ((2, None), (3, 95), (1, 90))),
        PartitionInfo("orders", 2, -1, 5, (3, 1, 2), (), None, ((3, None), (1, None), (2, None))),
    ),
    groups=(
        GroupInfo(
            "billing",
            "stable",
            (GroupMember("m-1", "billing-app", "/127.0.0.1", (("orders", 0), ("orders", 1))),),
            (CommittedOffset("orders", 0, 100), CommittedOffset("orders", 1, None)),
        ),
    ),
    events=(
        Event(1_795_000_000.0, "rlogd", "process_exited", "broker-2 (pid 4102) exited"),
        Event(1_795_000_004.0, "controller", "isr_shrunk", "orders-0: ISR 1,2,3 -> 1,3"),
    ),
    traffic=(
        BrokerTraffic(1, pid=4101, ts=1_795_000_010.0, records_in=1_000, records_out=700),
        BrokerTraffic(3, pid=4103, ts=1_795_000_010.0, records_in=200, records_out=0),
    ),
)
# The same cluster a second later: 30 records produced to broker-1 and 12 read from it;
# 5 produced to broker-3.
LATER = Snapshot(
    taken_at=101.0,
    processes=FIXED.processes,
    partitions=(
        PartitionInfo("orders", 0, 1, 3, (1, 2, 3), (1, 3), 150, ((1, 180), (2, 80), (3, 180))),
        PartitionInfo("orders", 1, 3, 2, (2, 3, 1), (3, 1), 95, ((2, None), (3, 100), (1, 95))),
        FIXED.partitions[2],
    ),
    groups=FIXED.groups,
    traffic=(
        BrokerTraffic(1, pid=4101, ts=1_795_000_011.0, records_in=1_030, records_out=712),
        BrokerTraffic(3, pid=4103, ts=1_795_000_011.0, records_in=205, records_out=0),
    ),
)
NOW_MS = 1_795_000_011_000


def in_sync(topic: str, number: int, hw: int, lso: int) -> PartitionInfo:
    """A partition of a healthy 3-broker cluster: leaders spread, every replica caught up."""
    replicas = tuple((number + i) % 3 + 1 for i in range(3))
    ends = tuple((r, hw) for r in replicas)
    return PartitionInfo(topic, number, replicas[0], 1, replicas, replicas, hw, ends, lso)


# A healthy cluster with transactions: one open on orders-0 since offset 130 holds its LSO
# below the HW; another, committing, holds orders-1's until its markers are written; a third
# on eight partitions of events has outlived its 60 s timeout.
TRANSACTIONS = Snapshot(
    taken_at=200.0,
    processes=(
        *FIXED.processes[:2],
        replace(FIXED.processes[1], name="broker-2", id=2, pid=4102),
        replace(FIXED.processes[3], state="running"),
    ),
    partitions=(
        in_sync("orders", 0, 150, 130),
        in_sync("orders", 1, 95, 93),
        in_sync("orders", 2, 60, 60),
        *(in_sync("events", i, 40, 31) for i in range(8)),
    ),
    transactions=(
        TransactionInfo(
            "billing-eos", 1, 4000, "Ongoing", 2, 60_000, NOW_MS - 12_000, (("orders", 0),)
        ),
        TransactionInfo(
            "audit", 2, 4001, "PrepareCommit", 0, 60_000, NOW_MS - 2_000, (("orders", 1),)
        ),
        TransactionInfo(
            "loader",
            3,
            4002,
            "Ongoing",
            7,
            60_000,
            NOW_MS - 95_000,
            tuple(("events", i) for i in range(8)),
        ),
        TransactionInfo("refunds", 1, 4003, "CompleteAbort", 5, 60_000, NOW_MS - 30_000),
        TransactionInfo("payer", 2, 4004, "CompleteCommit"),  # listed, not described
    ),
    transactions_at_ms=NOW_MS,
)


@pytest.fixture
def utc() -> Iterator[None]:
    """Event times in UTC, so the pictures do not depend on the machine's zone."""
    mp = pytest.MonkeyPatch()
    mp.setenv("TZ", "UTC")
    time.tzset()
    yield
    mp.undo()
    time.tzset()


def fixed_app() -> RlogTui:
    return RlogTui(None, None, title="rlog", sub_title="fixed snapshot")


async def show_fixed(pilot: Pilot[None]) -> None:
    app = pilot.app
    assert isinstance(app, RlogTui)
    app.show_snapshot(FIXED)
    app.show_snapshot(LATER)
    await pilot.pause()


def visible(app: RlogTui, widget: Widget) -> bool:
    """On screen, not zero-sized, and inside the 80x24 terminal."""
    region = widget.region
    screen = app.screen.region
    return (
        widget.display and region.width > 0 and region.height > 0 and screen.contains_region(region)
    )


def test_every_panel_is_usable_at_80x24(utc: None) -> None:
    app = fixed_app()

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await show_fixed(pilot)
            for always in ("#brokers", "#panels", "#status"):
                assert visible(app, app.query_one(always)), always
            assert table(app, "#brokers").row_count == 4
            panels = {
                "1": ("partitions", "#partition-table"),
                "2": ("groups", "#group-table"),
                "3": ("rates", "#rate-1-in"),
                "4": ("events", "#event-log"),
                "5": ("transactions", "#txn-table"),
            }
            for key, (tab, selector) in panels.items():
                await pilot.press(key)
                await pilot.pause()
                assert app.query_one(TabbedContent).active == tab
                assert visible(app, app.query_one(selector)), selector
                assert visible(app, table(app, "#brokers"))  # still there to act on
            # Rates: 30 records/s in and 12 out on broker-1, 5 in on broker-3.
            assert app.query_one("#rate-1-in", Sparkline).data[-1] == 30.0
            assert app.query_one("#rate-1-out", Sparkline).data[-1] == 12.0
            assert app.query_one("#rate-3-in", Sparkline).data[-1] == 5.0
            assert cell(app, "#brokers", "broker-1", "IN/s") == "30"
            # The create-topic form fits too, buttons included.
            await pilot.press("c")
            await pilot.pause()
            for part in ("#name", "#partitions", "#replication", "#create", "#cancel"):
                assert visible(app, app.screen.query_one(part)), part
            await pilot.press("escape")
            await pilot.pause()
            assert not isinstance(app.screen, CreateTopicScreen)

    run(body, timeout_s=20)


def test_every_brokers_leo_and_lag_fit_in_80_columns_and_bars_widen_with_the_screen() -> None:
    # The fixed cluster's partitions under a topic name as long as real ones.
    topic = "payments-eu-west"
    snapshot = replace(LATER, partitions=tuple(replace(p, topic=topic) for p in LATER.partitions))
    rows = [f"{topic}-{number}" for number in range(3)]
    app = fixed_app()

    def lagging() -> str:  # broker 2's replica of partition 0: 100 behind
        return cell(app, "#partition-table", rows[0], "2 LEO")

    async def resize(pilot: Pilot[None], width: int) -> None:
        await pilot.resize_terminal(width, SIZE[1])
        await pilot.pause()
        await pilot.pause()
        header = shown_lines(app, "#partition-table")[0]
        assert re.split(r"\s{2,}", header.strip())[-3:] == ["1 LEO", "2 LEO", "3 LEO"], header
        for row in rows:
            shown, cells = shown_leo_cells(app, row, (1, 2, 3))
            assert shown == cells, f"at {width}: {row}: {shown} on screen, {cells} in the table"

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            app.show_snapshot(snapshot)
            await resize(pilot, SIZE[0])
            assert lagging() == "80 -100"  # at 80 columns: the numbers, no bars
            await resize(pilot, 120)
            assert lagging() == "80 █▊·· -100"  # wide: the whole bars
            await resize(pilot, 90)
            assert lagging() == "80 ▉· -100"  # between: shorter bars
            await resize(pilot, SIZE[0])
            assert lagging() == "80 -100"

    run(body, timeout_s=20)


def test_keys_without_a_selection_or_with_a_failing_action_do_not_crash(utc: None) -> None:
    class Refusing:
        def process(self, op: str, target: str, *, stay_down: bool = False) -> str:
            raise ActionFailed(f"{op} {target}: refused by rlogd")

        def create_topic(self, name: str, partitions: int, replication_factor: int) -> str:
            raise RuntimeError("boom")

    app = RlogTui(None, Refusing())

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await pilot.press("p")  # nothing shown yet: nothing selected
            assert "no process selected" in status(app)
            await show_fixed(pilot)
            # While a dialog is open the dashboard's keys do nothing: no second dialog.
            await pilot.press("k")
            await pilot.pause()
            for key in ("k", "c", "2"):
                await pilot.press(key)
                await pilot.pause()
            assert (
                len(app.screen_stack) == 2 and app.query_one(TabbedContent).active == "partitions"
            )
            await pilot.press("n")
            await pilot.pause()
            assert len(app.screen_stack) == 1
            await select_process(pilot, app, "broker-3")
            await pilot.press("r")
            await wait_for(pilot, "the refusal", lambda: "refused by rlogd" in status(app))
            await pilot.press("c")
            await pilot.pause()
            app.screen.query_one("#name", Input).value = "t"
            await pilot.press("enter")
            await wait_for(pilot, "the error", lambda: "RuntimeError: boom" in status(app))
            assert app.is_running

    run(body, timeout_s=20)


def test_a_failing_source_is_a_status_line_until_it_works_again() -> None:
    healthy = threading.Event()

    def source() -> Snapshot:
        if not healthy.is_set():
            raise RuntimeError("disk on fire")
        return FIXED

    app = RlogTui(source, None, interval_s=0.1)

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, "the failure", lambda: "disk on fire" in status(app))
            healthy.set()
            await wait_for(pilot, "the processes", lambda: table(app, "#brokers").row_count == 4)
            assert "disk on fire" not in status(app)

    run(body, timeout_s=20)


def test_snapshot_partitions(snap_compare: SnapCompare, utc: None) -> None:
    assert snap_compare(fixed_app(), terminal_size=SIZE, run_before=show_fixed)


def test_snapshot_groups(snap_compare: SnapCompare, utc: None) -> None:
    assert snap_compare(fixed_app(), press=["2"], terminal_size=SIZE, run_before=show_fixed)


def test_snapshot_events(snap_compare: SnapCompare, utc: None) -> None:
    assert snap_compare(fixed_app(), press=["4"], terminal_size=SIZE, run_before=show_fixed)


def test_snapshot_create_topic_form(snap_compare: SnapCompare, utc: None) -> None:
    assert snap_compare(fixed_app(), press=["c"], terminal_size=SIZE, run_before=show_fixed)


def test_snapshot_kill_dialog(snap_compare: SnapCompare, utc: None) -> None:
    assert snap_compare(fixed_app(), press=["k"], terminal_size=SIZE, run_before=show_fixed)


def test_snapshot_rates(snap_compare: SnapCompare, utc: None) -> None:
    assert snap_compare(fixed_app(), press=["3"], terminal_size=SIZE, run_before=show_fixed)


async def show_transactions(pilot: Pilot[None]) -> None:
    app = pilot.app
    assert isinstance(app, RlogTui)
    app.show_snapshot(TRANSACTIONS)
    await pilot.pause()


def test_snapshot_partitions_with_open_transactions(snap_compare: SnapCompare) -> None:
    # The LSO column appears before HW, filled where a transaction holds the LSO back.
    assert snap_compare(fixed_app(), terminal_size=SIZE, run_before=show_transactions)


def test_snapshot_transactions(snap_compare: SnapCompare) -> None:
    assert snap_compare(fixed_app(), press=["5"], terminal_size=SIZE, run_before=show_transactions)


# -- offline brokers and recent ISR changes, from fixed snapshots -----------------------------

T0 = 1_795_000_100.0  # wall time of the snapshots below


def part(
    number: int,
    leader: int,
    replicas: tuple[int, ...],
    isr: tuple[int, ...],
    fenced: tuple[int, ...] = (),
) -> PartitionInfo:
    ends = tuple((r, 40) for r in replicas)
    return PartitionInfo("orders", number, leader, 2, replicas, isr, 40, ends, 40, fenced)


def brokers(*states: str) -> tuple[ProcessInfo, ...]:
    return (
        ProcessInfo("controller", "controller", None, 4100, "running"),
        *(
            ProcessInfo(f"broker-{i}", "broker", i, 4100 + i, state)
            for i, state in enumerate(states, start=1)
        ),
    )


# broker-2 paused (rlogd knows; the controller still counts it live, so it still leads
# orders-0); broker-3 running but cut off, so the controller fenced it and moved its leadership
# of orders-1... except where no other replica was in sync: orders-2 still names it.
OFFLINE = Snapshot(
    taken_at=300.0,
    wall_time=T0,
    processes=brokers("running", "paused", "running"),
    partitions=(
        part(0, 2, (2, 3, 1), (2, 1), fenced=(3,)),
        part(1, 1, (3, 1, 2), (1, 2), fenced=(3,)),
        part(2, 3, (1, 2, 3), (3,), fenced=(3,)),
    ),
)
RECOVERED = replace(
    OFFLINE,
    taken_at=301.0,
    wall_time=T0 + 1,
    processes=brokers("running", "running", "running"),
    partitions=(
        part(0, 2, (2, 3, 1), (2, 1, 3)),
        part(1, 1, (3, 1, 2), (1, 2, 3)),
        part(2, 3, (1, 2, 3), (3, 1)),
    ),
)


def styles(found: Text) -> dict[str, str]:
    """Each styled piece of a cell's text and its style."""
    return {found.plain[span.start : span.end]: str(span.style) for span in found.spans}


def partition_cell(app: RlogTui, row: str, column: str) -> Text:
    found = table(app, "#partition-table").get_cell(row, column)
    assert isinstance(found, Text)
    return found


def test_offline_leaders_and_replicas_are_marked_until_they_are_back() -> None:
    app = fixed_app()

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            app.show_snapshot(OFFLINE)
            await pilot.pause()
            rows = ("orders-0", "orders-1", "orders-2")
            leaders = {r: cell(app, "#partition-table", r, "LEADER") for r in rows}
            assert leaders == {"orders-0": "2 paused", "orders-1": "1", "orders-2": "3 fenced"}
            assert partition_cell(app, "orders-0", "LEADER").style == model.OFFLINE_STYLE
            assert partition_cell(app, "orders-1", "LEADER").style == ""
            # Offline replicas are marked ✗ (purple); an online one out of the ISR still "!".
            replicas = partition_cell(app, "orders-2", "REPLICAS")
            assert replicas.plain == "1!,2✗,3✗"
            assert styles(replicas) == {
                "1!": model.OUT_OF_SYNC_STYLE,
                "2✗": model.OFFLINE_STYLE,
                "3✗": model.OFFLINE_STYLE,
            }
            assert cell(app, "#partition-table", "orders-0", "REPLICAS") == "2✗,3✗,1"
            # The partitions whose named leader cannot serve.
            assert "2 leader offline" in status(app)

            app.show_snapshot(RECOVERED)
            await pilot.pause()
            assert cell(app, "#partition-table", "orders-0", "LEADER") == "2"
            assert cell(app, "#partition-table", "orders-2", "LEADER") == "3"
            assert partition_cell(app, "orders-0", "LEADER").style == ""
            assert cell(app, "#partition-table", "orders-0", "REPLICAS") == "2,3,1"
            assert cell(app, "#partition-table", "orders-2", "REPLICAS") == "1,2!,3"
            assert "offline" not in status(app)

    run(body, timeout_s=20)


def isr_event(kind: str, ts: float, number: int, **fields: object) -> Event:
    """A controller event as the journal has it (see rlog.daemon.controller.record_events)."""
    line = {
        "ts": ts,
        "source": "controller",
        "kind": kind,
        "message": f"partition orders-{number}: ...",
        "topic": "orders",
        "partition": number,
        **fields,
    }
    return Event.from_journal(line)


def test_a_recent_isr_change_is_marked_until_it_is_old() -> None:
    app = fixed_app()
    healthy = brokers("running", "running", "running")
    shrunk = Snapshot(
        taken_at=400.0,
        wall_time=T0,
        processes=healthy,
        partitions=(part(0, 2, (2, 3, 1), (2, 1)), part(1, 3, (3, 1, 2), (3, 1, 2))),
        events=(
            isr_event("isr_shrunk", T0 - 0.8, 0, isr=[2, 1], previous_isr=[2, 3, 1], removed=[3]),
            # Long ago (the journal's backlog at start): nothing to mark.
            isr_event("isr_shrunk", T0 - 60, 1, isr=[3, 1], removed=[2]),
        ),
    )
    # A second later: broker 3 is back in orders-0's ISR, and orders-1 has a new leader.
    grown = Snapshot(
        taken_at=401.0,
        wall_time=T0 + 1,
        processes=healthy,
        partitions=(part(0, 2, (2, 3, 1), (2, 1, 3)), part(1, 1, (3, 1, 2), (1, 2, 3))),
        events=(
            isr_event("isr_expanded", T0 + 0.5, 0, isr=[2, 1, 3], added=[3]),
            isr_event("leader_elected", T0 + 0.6, 1, leader=1, previous_leader=3),
        ),
    )

    def later(seconds: float) -> Snapshot:
        return replace(grown, taken_at=401.0 + seconds, wall_time=T0 + 1 + seconds, events=())

    async def body() -> None:
        async with app.run_test(size=SIZE) as pilot:
            app.show_snapshot(shrunk)
            await pilot.pause()
            isr = partition_cell(app, "orders-0", "ISR")
            assert isr.plain == "2,1 ↓3" and isr.style == model.CHANGED_STYLE
            assert partition_cell(app, "orders-1", "ISR").plain == "3,1,2"
            assert partition_cell(app, "orders-1", "ISR").style == ""

            app.show_snapshot(grown)
            await pilot.pause()
            # Healed within one refresh: both changes are still shown.
            assert partition_cell(app, "orders-0", "ISR").plain == "2,1,3 ↓3↑3"
            leader = partition_cell(app, "orders-1", "LEADER")
            assert leader.plain == "1" and leader.style == model.CHANGED_STYLE
            assert partition_cell(app, "orders-1", "ISR").style == model.CHANGED_STYLE

            app.show_snapshot(later(3.5))  # 4.0 s after the expansion: still marked
            await pilot.pause()
            assert partition_cell(app, "orders-0", "ISR").plain == "2,1,3 ↓3↑3"
            assert partition_cell(app, "orders-1", "LEADER").style == model.CHANGED_STYLE

            app.show_snapshot(later(5.0))  # 5.5 s after it: old, unmarked
            await pilot.pause()
            for row, plain in (("orders-0", "2,1,3"), ("orders-1", "1,2,3")):
                isr = partition_cell(app, row, "ISR")
                assert isr.plain == plain and isr.style == ""
            assert partition_cell(app, "orders-1", "LEADER").style == ""

    run(body, timeout_s=20)


async def show_offline_and_changes(pilot: Pilot[None]) -> None:
    app = pilot.app
    assert isinstance(app, RlogTui)
    shrink = isr_event("isr_shrunk", T0 - 1, 1, isr=[1, 2], previous_isr=[3, 1, 2], removed=[3])
    elected = isr_event("leader_elected", T0 - 1, 1, leader=1, previous_leader=3)
    app.show_snapshot(replace(OFFLINE, events=(elected, shrink)))
    await pilot.pause()


def test_snapshot_partitions_offline_and_recent_changes(snap_compare: SnapCompare) -> None:
    # A paused leader, a fenced one, offline replicas, and orders-1's new leader and ISR.
    assert snap_compare(fixed_app(), terminal_size=SIZE, run_before=show_offline_and_changes)
