"""The Textual app: the brokers table on top (its selected row is what the keys act on), tabs
for partitions, consumer groups, records/s sparklines, the event journal and transactions
below, a status line and the key bindings in the footer.

Snapshots come from a ``source`` callable run in a worker thread every ``interval_s``; the app
only turns them into widgets (through :mod:`rlog.cli.tui.model`). Tests pass their own source
and actions, or no source and push snapshots with :meth:`RlogTui.show_snapshot`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.text import Text
from textual import events, work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import (
    DataTable,
    Footer,
    Header,
    Label,
    RichLog,
    Sparkline,
    Static,
    TabbedContent,
    TabPane,
)

from rlog.cli.tui import model
from rlog.cli.tui.screens import KILL_STAY_DOWN, ConfirmScreen, CreateTopicScreen, KillScreen
from rlog.cli.tui.snapshot import Snapshot
from rlog.cli.tui.sources import EVENT_BACKLOG, ActionFailed, Actions

Source = Callable[[], Snapshot]
TABS = ("partitions", "groups", "rates", "events", "transactions")
# Process ops that ask first: they take a broker away from the cluster. Kill asks with its own
# dialog (KillScreen): restart by the policy, or stay down.
CONFIRM_OPS = {"restart": "Restart {} (stop, then start)?"}
MODAL_BLOCKED = {"process", "create_topic", "show_tab"}  # the app actions a dialog hides


class RlogTui(App[None]):
    """``rlog tui``."""

    CSS_PATH = Path(__file__).with_name("tui.tcss")
    TITLE = "rlog"
    BINDINGS = [
        Binding("k", "process('kill')", "Kill"),
        Binding("p", "process('pause')", "Pause"),
        Binding("r", "process('resume')", "Resume"),
        Binding("s", "process('restart')", "Restart"),
        Binding("c", "create_topic", "New topic"),
        Binding("question_mark", "help", "Help"),
        Binding("q", "quit", "Quit"),
        *(Binding(str(i + 1), f"show_tab('{tab}')", tab, show=False) for i, tab in enumerate(TABS)),
    ]

    def __init__(
        self,
        source: Source | None,
        actions: Actions | None,
        *,
        interval_s: float = 1.0,
        title: str = "rlog",
        sub_title: str = "",
    ) -> None:
        super().__init__()
        self.source = source
        self.actions = actions
        self.interval_s = interval_s
        self.title = title
        self.sub_title = sub_title
        self.snapshot: Snapshot | None = None
        self.action_message: Text | None = None
        self._previous: Snapshot | None = None  # the last snapshot with counters, for rates
        self._history_in: dict[int, tuple[float, ...]] = {}
        self._history_out: dict[int, tuple[float, ...]] = {}
        # Recent ISR and leader changes by partition, kept across refreshes (each snapshot
        # brings only the events new since the last one).
        self._changes: dict[model.PartitionKey, model.PartitionChange] = {}
        self._collecting = False

    # -- layout -------------------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield DataTable(id="brokers", cursor_type="row", zebra_stripes=True)
        with TabbedContent(id="panels", initial="partitions"):
            with TabPane("1 Partitions", id="partitions"):
                yield DataTable(id="partition-table", cursor_type="row")
            with TabPane("2 Groups", id="groups"):
                yield Static(model.groups_message(Snapshot(0.0)), id="groups-note", markup=False)
                yield DataTable(id="group-table", cursor_type="row")
            with TabPane("3 Records/s", id="rates"), VerticalScroll(id="rate-list"):
                yield Static(model.RATES_NOTE, id="rates-note", markup=False)
            with TabPane("4 Events", id="events"):
                yield RichLog(id="event-log", max_lines=EVENT_BACKLOG, wrap=True, min_width=20)
            with TabPane("5 Transactions", id="transactions"):
                yield Static(model.transactions_message(Snapshot(0.0)), id="txn-note")
                yield DataTable(id="txn-table", cursor_type="row")
        yield Static(model.status_line(None, self.interval_s), id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#brokers", DataTable).focus()
        if self.source is not None:
            self.refresh_snapshot()
            self.set_interval(self.interval_s, self.refresh_snapshot)

    # -- data ---------------------------------------------------------------------------------

    def refresh_snapshot(self) -> None:
        """Start a collection unless one is still running (a slow source skips a beat rather
        than piling up threads)."""
        if self._collecting or self.source is None:
            return
        self._collecting = True
        self._collect(self.source)

    @work(thread=True, group="refresh", exit_on_error=False)
    def _collect(self, source: Source) -> None:
        try:
            snapshot = source()
        except Exception as error:  # a broken source is a status line, never a crash
            failure = f"refresh failed: {type(error).__name__}: {error}"
            snapshot = Snapshot(time.monotonic(), errors=(failure,))
        self.call_from_thread(self._collected, snapshot)

    def _collected(self, snapshot: Snapshot) -> None:
        self._collecting = False
        self.show_snapshot(snapshot)

    def show_snapshot(self, snapshot: Snapshot) -> None:
        """Show one snapshot: every table, the sparklines, new events and the status line."""
        rates = model.traffic_rates(self._previous, snapshot)
        self._history_in = model.push_series(self._history_in, rates.records_in)
        self._history_out = model.push_series(self._history_out, rates.records_out)
        if snapshot.traffic:
            self._previous = snapshot
        self.snapshot = snapshot
        sync_table(
            self.query_one("#brokers", DataTable),
            model.BROKER_COLUMNS,
            model.broker_rows(snapshot, rates.records_in),
        )
        now = snapshot.wall_time if snapshot.wall_time is not None else time.time()
        self._changes = model.partition_changes(self._changes, snapshot.events, now)
        self._show_partitions()
        self.query_one("#groups-note", Static).update(model.groups_message(snapshot))
        sync_table(
            self.query_one("#group-table", DataTable),
            model.GROUP_COLUMNS,
            model.group_rows(snapshot.groups, snapshot.partitions),
        )
        self.query_one("#txn-note", Static).update(model.transactions_message(snapshot))
        sync_table(
            self.query_one("#txn-table", DataTable),
            model.TXN_COLUMNS,
            model.transaction_rows(snapshot.transactions, snapshot.transactions_at_ms),
        )
        self._show_rates()
        log = self.query_one("#event-log", RichLog)
        for event in snapshot.events:
            log.write(model.event_line(event))
        self._show_status()

    def _show_partitions(self, screen_width: int | None = None) -> None:
        """The partitions table, its LEO cells as wide as the screen allows."""
        if self.snapshot is None:
            return
        table = self.query_one("#partition-table", DataTable)
        partitions = self.snapshot.partitions
        # Its own width once laid out, else (or on a resize, before the layout follows) the
        # screen's: its tab has no padding. Less a vertical scrollbar when the rows (and the
        # header) will not fit its height.
        width = screen_width or table.size.width or self.size.width
        if len(partitions) + 1 > table.size.height:
            width -= table.styles.scrollbar_size_vertical
        _, rows = model.fitting_partition_rows(
            partitions, self.snapshot.processes, self._changes, width
        )
        sync_table(table, model.partition_columns(partitions), rows)
        if not table.size.height and screen_width is None:
            # Not laid out yet (the first snapshot): fit it again once its height is known.
            self.call_after_refresh(self._show_partitions, self.size.width)

    def on_resize(self, event: events.Resize) -> None:
        self._show_partitions(event.size.width)  # the lag bars may fit now, or no longer

    def _show_rates(self) -> None:
        box = self.query_one("#rate-list", VerticalScroll)
        for view in model.rate_views(self._history_in, self._history_out):
            name = f"{view.broker}-{view.direction}"
            found = box.query(f"#rate-{name}")
            if found:
                spark = found.first(Sparkline)
            else:
                spark = Sparkline((), id=f"rate-{name}", classes=f"rate rate-{view.direction}")
                box.mount(Label("", id=f"rate-label-{name}", markup=False), spark)
            spark.data = list(view.series)
            label = box.query(f"#rate-label-{name}")
            if label:
                label.first(Label).update(view.caption)

    def _show_status(self) -> None:
        line = model.status_line(self.snapshot, self.interval_s)
        if self.action_message is not None:
            line = Text.assemble(self.action_message, " | ", line)
        self.query_one("#status", Static).update(line)

    # -- keys ---------------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        # A dialog is open: its own keys only (typing 'k' in a topic name kills nothing).
        return not (isinstance(self.screen, ModalScreen) and action in MODAL_BLOCKED)

    def selected_process(self) -> str | None:
        """The name (broker-N or controller) of the brokers table's selected row."""
        table = self.query_one("#brokers", DataTable)
        if not table.row_count:
            return None
        row_key, _ = table.coordinate_to_cell_key(table.cursor_coordinate)
        return None if row_key.value is None else str(row_key.value)

    def action_process(self, op: str) -> None:
        target = self.selected_process()
        if target is None:
            self._say(Text(f"{op}: no process selected (the cluster is not running?)", "red"))
            return
        if op == "kill":
            self.push_screen(KillScreen(target), lambda how: self._kill(target, how))
        elif op in CONFIRM_OPS:
            question = CONFIRM_OPS[op].format(target)
            self.push_screen(
                ConfirmScreen(question), lambda yes: self._process(op, target) if yes else None
            )
        else:
            self._process(op, target)

    def _kill(self, target: str, how: str | None) -> None:
        if how is not None:  # None: cancelled
            self._process("kill", target, stay_down=how == KILL_STAY_DOWN)

    def _process(self, op: str, target: str, *, stay_down: bool = False) -> None:
        if self.actions is None:
            return
        actions = self.actions
        self._say(Text(f"{op} {target}...", "yellow"))
        self._act(lambda: actions.process(op, target, stay_down=stay_down))

    def action_create_topic(self) -> None:
        brokers = len(model.broker_ids(self.snapshot.processes)) if self.snapshot else 1
        self.push_screen(CreateTopicScreen(min(3, max(1, brokers))), self._create_topic)

    def _create_topic(self, request: model.TopicRequest | None) -> None:
        if request is None or self.actions is None:
            return
        actions = self.actions
        self._say(Text(f"creating topic {request.name}...", "yellow"))
        self._act(
            lambda: actions.create_topic(
                request.name, request.partitions, request.replication_factor
            )
        )

    @work(thread=True, group="actions", exit_on_error=False)
    def _act(self, action: Callable[[], str]) -> None:
        try:
            message, failed = action(), False
        except ActionFailed as error:
            message, failed = str(error), True
        except Exception as error:  # an action's bug is a message, never a crash
            message, failed = f"{type(error).__name__}: {error}", True
        self.call_from_thread(self._acted, message, failed)

    def _acted(self, message: str, failed: bool) -> None:
        self._say(Text(message, "bold red" if failed else "green"))
        self.notify(message, severity="error" if failed else "information")
        self.refresh_snapshot()  # show the effect now, not at the next tick

    def _say(self, message: Text) -> None:
        self.action_message = message
        self._show_status()

    def action_show_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab

    def action_help(self) -> None:
        self.notify(
            "k kill (then y: restarted by policy, d: stays down until s), p pause, r resume, "
            "s restart the selected process; c create a topic; "
            "1-5 switch tabs; q quit. "
            + " ".join((model.MARKS_NOTE, model.LSO_NOTE, model.RATES_NOTE)),
            title="rlog tui",
            timeout=15,
        )


def sync_table(table: DataTable[Text], columns: Sequence[str], rows: Sequence[model.Row]) -> None:
    """Show ``rows`` in ``table``, keeping the selected row (by key) across refreshes: cells are
    updated in place when the rows and columns are the same, else the table is rebuilt."""
    have_columns = [str(column.label) for column in table.columns.values()]
    have_rows = [key.value for key in table.rows]
    wanted_rows = [key for key, _ in rows]
    if have_columns == list(columns) and have_rows == wanted_rows:
        for key, cells in rows:
            for column, cell in zip(columns, cells, strict=True):
                table.update_cell(key, column, cell, update_width=True)
        return
    selected = None
    if table.row_count:
        selected = table.coordinate_to_cell_key(table.cursor_coordinate)[0].value
    table.clear(columns=have_columns != list(columns))
    if have_columns != list(columns):
        for column in columns:
            table.add_column(column, key=column)
    for key, cells in rows:
        table.add_row(*cells, key=key)
    if selected in wanted_rows:
        table.move_cursor(row=wanted_rows.index(selected))
