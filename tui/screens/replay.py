"""The replay screen: the live screen over a recorded session, a timeline under the header, and
play / speed / seek keys in place of the review actions (only `n`, a review note, still records).

The screen folds events exactly as the live one does; the playing, the seeking and the rebuild
after a seek belong to :class:`portside.tui.replay_app.ReplayApp`, which the actions here call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

from textual.app import ComposeResult
from textual.geometry import Size
from textual.widget import Widget

from portside.core.session.review import ReviewGate

from ..model import SessionModel
from ..widgets.timeline import Timeline
from .review import ReviewScreen
from .review_keys import VIEW_BINDINGS, binding


class ReplayControl(Protocol):
    """What the replay keys ask of the app that owns the replayer."""

    def replay_toggle(self) -> None: ...
    def replay_speed(self, factor: float) -> None: ...
    def replay_step(self) -> None: ...
    async def replay_marker(self, kinds: list[str] | None, forward: bool) -> None: ...
    async def replay_goto(self, spec: str) -> None: ...
    async def replay_edge(self, end: bool) -> None: ...
    def replay_header(self) -> str: ...


REPLAY_BINDINGS = [
    binding("space", "play", "Play/Pause", "replay.play", "Play or pause the replay"),
    binding("plus", "speed(2.0)", "Faster", "replay.faster",
       "Double the replay speed (also while playing)", key_display="+"),
    # Slower and Prev mark are in ? help, not the footer: at 120 columns the footer cut Help.
    binding("minus", "speed(0.5)", "Slower", "replay.slower",
       "Halve the replay speed (also while playing)", key_display="-", show=False),
    binding("full_stop", "step", "Step", "replay.step", "Show exactly the next event, then pause",
       key_display="."),
    binding("right_square_bracket", "next_marker", "Next mark", "replay.next-marker",
       "Jump to the next marker: alarm, intervention, run start or end, claim", key_display="]"),
    binding("left_square_bracket", "prev_marker", "Prev mark", "replay.prev-marker",
       "Jump back to the previous marker", key_display="[", show=False),
    binding("A", "next_alarm", "Next alarm", "replay.next-alarm", "Jump to the next alarm raised",
       show=False),
    binding("I", "next_intervention", "Next intervention", "replay.next-intervention",
       "Jump to the next human intervention", show=False),
    binding("g", "goto", "Go to", "replay.goto", "Jump to an event: 123 (seq) or t 45.5 (seconds in)"),
    binding("0", "edge(False)", "Start", "replay.start", "Jump to the start of the session",
       show=False),
    binding("dollar_sign", "edge(True)", "End", "replay.end", "Jump to the end of the session",
       show=False, key_display="$"),
    binding("n", "note", "Review note", "replay.note",
       "Write a review note: stored in the session, marked as made during replay"),
    binding("d", "dismiss_failure", "Dismiss", "replay.dismiss-failure",
       "Hide the failure bar (the reason stays in the session log)"),
]
# The review actions of the live screen: bound here only to say they are off in replay.
DISABLED = [("a", "approve"), ("r", "reject"), ("e", "edit"), ("m", "message"),
            ("k", "acknowledge"), ("o", "override"), ("R", "rerun"), ("x", "abort"),
            ("v", "verdict")]
DISABLED_BINDINGS = [
    binding(key, f"disabled('{name}')", f"{name.capitalize()} (off)", f"replay.off-{name}",
       f"Off in replay: the session is over ({name} acts only on a live session)", show=False)
    for key, name in DISABLED
]
# ]/[ step between markers here, not between edits.
REPLAY_VIEW_BINDINGS = [b for b in VIEW_BINDINGS if b.id not in ("view.next-edit", "view.prev-edit")]


class ReplayScreen(ReviewScreen, inherit_bindings=False):
    BINDINGS = [*REPLAY_BINDINGS, *DISABLED_BINDINGS, *REPLAY_VIEW_BINDINGS]
    PALETTE = REPLAY_BINDINGS + REPLAY_VIEW_BINDINGS
    HELP_TITLE = "portside · keys of the replay"

    def __init__(self, model: SessionModel, gate: ReviewGate, *, control: ReplayControl,
                 markers: list[tuple[int, float, str]] | None, duration: float,
                 position: Callable[[], float], clock: Callable[[], float]) -> None:
        super().__init__(model, gate, mode="replay", clock=clock)
        self.control = control
        self.timeline = Timeline(markers, duration, position, id="timeline")

    def compose(self) -> ComposeResult:
        for widget in super().compose():
            yield widget
            if isinstance(widget, Widget) and widget.id == "header":
                yield self.timeline

    def tick(self) -> None:
        super().tick()
        self.timeline.sync()

    def _refresh_layout(self, size: Size | None = None, scroll: bool = False) -> None:
        # A full layout sets each widget's virtual size, a layout reactive: every widget whose
        # size changed then asks for one more layout of the whole screen, which changes
        # nothing where no scrollbar took or gave back space (the first frame's second
        # layout). Those asks, made during this layout, are dropped; a widget whose
        # scrollbars changed keeps its own.
        # Textual internals (8.2): where a version lacks them, the plain layout runs.
        if not (hasattr(self, "_layout_widgets") and hasattr(self, "_compositor")) or (
                scroll and not self._layout_widgets):
            super()._refresh_layout(size, scroll)
            return
        before = {w: (getattr(w, "_layout_required", True), _bars(w))
                  for w in self.walk_children(Widget)}
        super()._refresh_layout(size, scroll)
        for widget, _ in self._compositor.layers:
            asked, bars = before.get(widget, (False, (0, 0)))
            if getattr(widget, "_layout_required", False) and not asked \
                    and _bars(widget) == bars:
                widget._layout_required = False

    def _compositor_refresh(self) -> None:
        # Inside a batch (a seek's load) Textual renders the screen and then drops the frame
        # (App._display draws nothing while batched): ~30 ms for the empty screen before the
        # load. Skipped; the whole screen is drawn once the batch is over.
        if getattr(self.app, "_batch_count", 0):
            self._repaint_required = True
            return
        super()._compositor_refresh()

    def mode_text(self, status: str) -> str:
        return f" {self.control.replay_header()} · {status} "

    def status(self) -> str:
        # Nothing awaits the reviewer in a replay: the gate has no pending items to report.
        return self.model.state

    # --- replay keys --------------------------------------------------------------------------

    def action_play(self) -> None:
        self.control.replay_toggle()

    def action_speed(self, factor: float) -> None:
        self.control.replay_speed(factor)

    def action_step(self) -> None:
        self.control.replay_step()

    async def action_next_marker(self) -> None:
        await self.control.replay_marker(None, True)

    async def action_prev_marker(self) -> None:
        await self.control.replay_marker(None, False)

    async def action_next_alarm(self) -> None:
        await self.control.replay_marker(["alarm.raised"], True)

    async def action_next_intervention(self) -> None:
        await self.control.replay_marker(["intervention"], True)

    async def action_edge(self, end: bool) -> None:
        await self.control.replay_edge(end)

    def action_goto(self) -> None:
        from .dialogs import DialogResult, TextDialog

        async def done(result: DialogResult | None) -> None:
            if result is not None:
                await self.control.replay_goto(result.text)

        self.app.push_screen(TextDialog("Go to", "seq (e.g. 123) or time since the start "
                                        "(e.g. t 45.5)", confirm="Go"), done)

    def action_help(self) -> None:
        from .help import HelpScreen

        # The switched-off review keys are listed too, so nobody hunts for them.
        self.app.push_screen(HelpScreen(self.PALETTE + DISABLED_BINDINGS
                                        + list(self.app.BINDINGS),  # type: ignore[arg-type]
                                        title=self.HELP_TITLE))

    def action_disabled(self, name: str) -> None:
        self.notify(f"{name} is off in replay: the session is over. n writes a review note.",
                    title="replay", severity="warning", timeout=4)


def _bars(widget: Widget) -> tuple[int, int]:
    """The cells a widget's scrollbars take (a bar styled 0 wide takes none)."""
    return widget.scrollbar_size_vertical, widget.scrollbar_size_horizontal


def speed_label(speed: float) -> str:
    if math.isinf(speed):
        return "×max"
    return f"×{speed:g}"
