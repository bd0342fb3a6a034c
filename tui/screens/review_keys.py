"""The review screen's keys: what each does, shown in the footer, the help screen and the command
palette (one table, read by all three). The replay screen takes the view keys and disables the
review keys (screens/replay.py)."""

from __future__ import annotations

from textual.binding import Binding


def binding(key: str, action: str, description: str, id: str, tooltip: str, show: bool = True,
       key_display: str | None = None) -> Binding:
    return Binding(key, action, description, show=show, id=id, tooltip=tooltip,
                   key_display=key_display)


REVIEW_BINDINGS = [
    binding("a", "approve", "Approve", "review.approve", "Approve the selected proposed edit"),
    binding("r", "reject", "Reject", "review.reject",
       "Reject the selected edit with a reason the agent is told"),
    binding("e", "edit", "Edit", "review.edit",
       "Change the proposal yourself in an editor pane, then send your version"),
    binding("m", "message", "Message", "review.message", "Send the agent a message (steering)"),
    binding("space", "pause", "Pause", "review.pause",
       "Pause or resume the agent: no new agent turn starts while paused"),
    binding("k", "acknowledge", "Ack", "review.acknowledge",
       "Acknowledge the selected alarm (else the most severe unacknowledged one)"),
    binding("o", "override", "Override", "review.override",
       "Judge an error alarm false, with a reason: it no longer blocks a pass", show=False),
    binding("R", "rerun", "Re-run", "review.rerun", "Run the candidate again", show=False),
    binding("x", "abort", "Abort run", "review.abort", "Abort the running run (kills its process group)",
       show=False),
    binding("v", "verdict", "Verdict", "review.verdict", "Give the session's verdict: pass or fail"),
    binding("n", "note", "Note", "review.note", "Write a note into the session log", show=False),
    binding("L", "localize", "Localize", "review.localize",
       "Where did it diverge? Trace a few steps of both runs and name the first place they part "
       "(input, a module, the loss, a gradient, clipping, an update) for the selected alarm",
       show=False),
    binding("d", "dismiss_failure", "Dismiss", "review.dismiss-failure",
       "Hide the failure bar (the reason stays in the session log and in `portside show`)"),
]
# Keys that answer an agent: hidden in a session without one (verification only).
AGENT_ACTIONS = frozenset({"approve", "reject", "edit", "message", "pause"})
# `c` (compare) is an app binding (tui/app.py), listed after ? and q: at 100 columns the
# footer cuts it rather than Help; it calls action_compare of this screen.
COMPARE_TOOLTIP = ("A reference's and the candidate's step records and logs side by side, "
                   "aligned by training progress, differing numbers marked; a jumps to the "
                   "selected alarm's step")
VIEW_BINDINGS = [
    binding("tab", "focus_column", "Next column", "view.next-column",
       "Move focus to the next column (Agent → Runs → Checks)", show=False),
    binding("z", "zoom", "Zoom", "view.zoom", "Maximise the focused column; z again restores it"),
    binding("s", "toggle_split", "Side-by-side", "view.split",
       "Toggle the selected diff between unified and side by side", show=False),
    binding("f", "toggle_full", "Full file", "view.full",
       "Toggle the selected diff between its hunks and the whole file", show=False),
    binding("right_square_bracket", "next_edit", "Next hunk", "view.next-edit",
       "Scroll the selected diff to its next hunk; after its last, the next proposed edit",
       show=False, key_display="]"),
    binding("left_square_bracket", "prev_edit", "Previous hunk", "view.prev-edit",
       "Scroll the selected diff to its previous hunk; before its first, the previous edit",
       show=False, key_display="["),
    binding("j,ctrl+down,shift+down", "diff_scroll(1)", "Diff down", "view.diff-down",
       "Scroll the selected diff down a row (the card's own scroll area)", show=False,
       key_display="j"),
    binding("J,ctrl+up,shift+up", "diff_scroll(-1)", "Diff up", "view.diff-up",
       "Scroll the selected diff up a row", show=False, key_display="J"),
    binding("slash", "search", "Search log", "view.search",
       "Search the visible run's log (enter: next match, esc: close)", show=False,
       key_display="/"),
    binding("greater_than_sign", "resize(2)", "Wider", "view.wider",
       "Make the focused column wider", show=False, key_display=">"),
    binding("less_than_sign", "resize(-2)", "Narrower", "view.narrower",
       "Make the focused column narrower", show=False, key_display="<"),
]
