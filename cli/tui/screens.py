"""The dashboard's modal screens: a yes/no confirmation, how to kill a process, and the
create-topic form."""

from __future__ import annotations

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static

from rlog.cli.tui.model import TopicRequest, parse_topic_form


class ConfirmScreen(ModalScreen[bool]):
    """Asks one question; dismisses with True for yes (``y``, Enter on Yes)."""

    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n,escape", "answer(False)", "No"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(self.question, id="question")
            with Horizontal(classes="buttons"):
                yield Button("Yes (y)", variant="error", id="yes")
                yield Button("No (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # the safe answer by default

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "yes")


KILL_POLICY = "policy"  # KillScreen's answers: restart by the restart policy, or stay down
KILL_STAY_DOWN = "stay-down"


class KillScreen(ModalScreen[str | None]):
    """Asks how to kill a process: ``y`` (or Enter on its button) as a crash the restart policy
    repairs, ``d`` kept down until restarted (``rlog chaos kill --stay-down``); ``n`` or Escape
    cancels (None)."""

    BINDINGS = [
        Binding("y", "answer('policy')", "Kill, restart by policy"),
        Binding("d", "answer('stay-down')", "Kill, stay down"),
        Binding("n,escape", "answer(None)", "Cancel"),
    ]

    def __init__(self, target: str) -> None:
        super().__init__()
        self.target = target

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(f"Kill {self.target} (SIGKILL)?", id="question")
            yield Label("y: restarted as the restart policy says; d: down until s", id="how")
            with Horizontal(classes="buttons"):
                yield Button("Kill (y)", variant="error", id=KILL_POLICY)
                yield Button("Stay down (d)", variant="error", id=KILL_STAY_DOWN)
                yield Button("No (n)", id="no")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()  # the safe answer by default

    def action_answer(self, how: str | None) -> None:
        self.dismiss(how)

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        pressed = event.button.id
        self.dismiss(pressed if pressed in (KILL_POLICY, KILL_STAY_DOWN) else None)


class CreateTopicScreen(ModalScreen[TopicRequest | None]):
    """Name, partitions, replication factor. A bad field is shown in the form, which stays
    open; Enter in any field or the Create button submits; Escape cancels (None)."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, replication_factor: int = 1) -> None:
        super().__init__()
        self.default_replication = replication_factor

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label("Create a topic", classes="title")
            yield self._input("name", "topic name", "")
            yield self._input("partitions", "partitions", "1")
            yield self._input("replication", "replication factor", str(self.default_replication))
            yield Static("", id="form-error", markup=False)
            with Horizontal(classes="buttons"):
                yield Button("Create", variant="primary", id="create")
                yield Button("Cancel", id="cancel")

    @staticmethod
    def _input(field_id: str, title: str, value: str) -> Input:
        field = Input(value=value, placeholder=title, id=field_id)
        field.border_title = title
        return field

    def on_mount(self) -> None:
        self.query_one("#name", Input).focus()

    def action_cancel(self) -> None:
        self.dismiss(None)

    @on(Input.Submitted)
    @on(Button.Pressed, "#create")
    def _submit(self) -> None:
        try:
            request = parse_topic_form(
                self.query_one("#name", Input).value,
                self.query_one("#partitions", Input).value,
                self.query_one("#replication", Input).value,
            )
        except ValueError as error:
            self.query_one("#form-error", Static).update(str(error))
            return
        self.dismiss(request)

    @on(Button.Pressed, "#cancel")
    def _cancelled(self) -> None:
        self.dismiss(None)
