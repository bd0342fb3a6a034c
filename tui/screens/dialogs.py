"""Modal dialogs for actions that need words: reject, message, override, note, abort, verdict,
and the editor pane for changing a proposal. Each remembers when it opened: that is when the
reviewer's attention started."""

from __future__ import annotations

import os
import shlex
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import ComposeResult, SuspendNotSupported
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Static, TextArea


@dataclass
class DialogResult:
    text: str
    opened_at: float
    choice: str = ""
    after: str | None = None  # the editor pane's text


class TextDialog(ModalScreen[DialogResult | None]):
    """One line of text; enter confirms, escape cancels."""

    BINDINGS = [Binding("escape", "cancel", "Cancel", id="dialog.cancel",
                        tooltip="Close without doing anything")]

    def __init__(self, title: str, prompt: str, *, required: bool = True, value: str = "",
                 confirm: str = "OK") -> None:
        super().__init__(classes="dialog")
        self.title_text = title
        self.prompt = prompt
        self.required = required
        self.value = value
        self.confirm = confirm
        self.opened_at = time.time()

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box"):
            yield Label(Text(self.title_text, style="bold"))
            yield Static(Text(self.prompt, style="dim"))
            yield Input(value=self.value, id="dialog-input")
            # In the dialog itself: a toast behind a modal went unseen (an empty reject reason
            # looked ignored).
            yield Static("", id="dialog-error")
            with Horizontal(classes="dialog-buttons"):
                yield Button(self.confirm, variant="primary", id="ok")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def _submit(self) -> None:
        text = self.query_one(Input).value
        if self.required and not text.strip():
            self.query_one("#dialog-error", Static).update(Text(
                f"{self.confirm}: this needs a few words (esc cancels)", style="bold red"))
            self.notify("this needs a few words", severity="warning")
            return
        self.dismiss(DialogResult(text, self.opened_at))

    @on(Input.Submitted)
    def _enter(self) -> None:
        self._submit()

    @on(Button.Pressed, "#ok")
    def _ok(self) -> None:
        self._submit()

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


class VerdictDialog(ModalScreen[DialogResult | None]):
    """pass or fail, with a note."""

    BINDINGS = [
        Binding("escape", "cancel", "Cancel", id="verdict.cancel", tooltip="No verdict now"),
    ]

    def __init__(self, summary: str) -> None:
        super().__init__(classes="dialog")
        self.summary = summary
        self.opened_at = time.time()

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box"):
            yield Label(Text("Verdict", style="bold"))
            yield Static(Text(self.summary))
            yield Input(placeholder="note (why) · then tab to Pass or Fail", id="dialog-input")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Pass", variant="success", id="pass")
                yield Button("Fail", variant="error", id="fail")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def action_choose(self, choice: str) -> None:
        self.dismiss(DialogResult(self.query_one(Input).value, self.opened_at, choice))

    @on(Input.Submitted)
    def _enter(self) -> None:
        self.focus_next()

    @on(Button.Pressed, "#pass")
    def _pass(self) -> None:
        self.action_choose("pass")

    @on(Button.Pressed, "#fail")
    def _fail(self) -> None:
        self.action_choose("fail")

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)


class EditDialog(ModalScreen[DialogResult | None]):
    """The proposed file in an editor pane; ctrl+s saves it as the reviewer's version."""

    BINDINGS = [
        Binding("ctrl+s", "save", "Use this version", id="edit.save",
                tooltip="Send this text as the reviewer's edit"),
        Binding("escape", "cancel", "Cancel", id="edit.cancel", tooltip="Discard changes"),
        Binding("ctrl+o", "external", "Open in $EDITOR", id="edit.external",
                tooltip="Edit the proposal in $EDITOR (when set)"),
    ]

    def __init__(self, path: str, text: str) -> None:
        super().__init__(classes="dialog")
        self.path = path
        self.text = text
        self.opened_at = time.time()

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog-box editor-box"):
            yield Label(Text(f"Edit the proposal: {self.path}", style="bold"))
            yield TextArea(self.text, id="editor", show_line_numbers=True, soft_wrap=False)
            yield Input(placeholder="note for the agent (optional)", id="dialog-input")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Use this version (ctrl+s)", variant="primary", id="ok")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one(TextArea).focus()

    @on(Button.Pressed, "#ok")
    def action_save(self) -> None:
        text = self.query_one(TextArea).text
        self.dismiss(DialogResult(self.query_one(Input).value, self.opened_at, after=text))

    @on(Button.Pressed, "#cancel")
    def action_cancel(self) -> None:
        self.dismiss(None)

    def action_external(self) -> None:
        editor = os.environ.get("VISUAL") or os.environ.get("EDITOR")
        if not editor:
            self.notify("set $EDITOR to edit outside portside", severity="warning")
            return
        area = self.query_one(TextArea)
        suffix = Path(self.path).suffix or ".txt"
        with tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False) as fh:
            fh.write(area.text)
            tmp = fh.name
        command = [*shlex.split(editor), tmp]
        try:
            try:
                with self.app.suspend():
                    error = _run_editor(command)
            except SuspendNotSupported:
                # No terminal to hand over (headless, web): an editor that opens its own
                # window, or a script, still works.
                error = _run_editor(command, stdin=subprocess.DEVNULL)
            if error is None:
                area.load_text(Path(tmp).read_text())
            else:
                self.notify(f"$EDITOR failed: {error}", severity="error")
        finally:
            Path(tmp).unlink(missing_ok=True)


def _run_editor(command: list[str], stdin: int | None = None) -> OSError | None:
    """Run the editor; an error is returned, not raised, so that a suspended app always
    resumes (Textual resumes only when the suspended block exits normally)."""
    try:
        subprocess.run(command, check=False, stdin=stdin)
    except OSError as exc:
        return exc
    return None
