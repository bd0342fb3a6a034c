"""The replay's first frame mounts what it shows, however many runs and edits the session has.

A session of a few hundred runs used to mount a tab, a pane (status, command, log, search box)
and its underline moves per run before its first frame (3.6 s at 90 runs, 1M events); now the
tab strip is one widget, only the selected run has a pane, and the Agent column mounts only its
newest entries. Ground truth: the session's events (how many runs, which is last, each run's
lines) counted here, not by the screen.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from conftest import until
from scenario import output as run_output
from scenario import run_started, session_start, train_lines
from screen_text import screen_lines

from portside.core.log import events as ev
from portside.core.replay.index import IndexArrays, SequenceSource
from portside.core.replay.opening import PendingOpening
from portside.core.replay.player import Replayer
from portside.tui.replay_app import ReplayApp, make_replay_app
from portside.tui.widgets import agent_column as agent_column_widget
from portside.tui.widgets.agent_column import AgentColumn
from portside.tui.widgets.runs import RunPane, RunsPanel

REPO = Path(__file__).resolve().parents[2]
SIZE = (120, 40)


def _session(n: int) -> list[ev.Event]:
    from bench.bench_replay import synthetic_events

    # Short runs: many of them in few events (about 27 events a run).
    return list(synthetic_events(n, session_id="many", run_events=(8, 12)))


def _app(events: list[ev.Event]) -> ReplayApp:
    replayer = Replayer(SequenceSource(events), speed=1)
    replayer.seek(replayer.resolve_from("alarm:last") - 1)  # as `portside replay --from` does
    return make_replay_app(replayer, session_id="many", autoplay=False)


async def _first_frame(pilot: Any) -> None:
    app = pilot.app
    await until(pilot, lambda: app.model.runs and not app._batch_count)
    await pilot.pause()


def _runs(events: list[ev.Event], upto: int | None = None) -> list[str]:
    """The runs started by ``upto`` (default: the point a replay opens at, the last alarm)."""
    if upto is None:
        upto = max(e.seq for e in events if isinstance(e, ev.AlarmRaised)) - 1
    return [e.run_id for e in events if isinstance(e, ev.RunStarted) and e.seq <= upto]


async def _first_frame_facts(events: list[ev.Event]) -> dict[str, Any]:
    app = _app(events)
    async with app.run_test(size=SIZE) as pilot:
        await _first_frame(pilot)
        runs = app.live.query_one(RunsPanel)
        last = app.model.runs[_runs(events)[-1]]
        return {"widgets": len(list(app.screen.query("*"))),
                "newest tab shown": RunPane.tab_label(last) in "\n".join(screen_lines(app)),
                "active": runs.active_run_id == last.run_id,
                "panes": list(runs.panes),
                "tabs": getattr(getattr(runs, "tabs", None), "run_ids", None),
                "runs": list(app.model.runs), "last": last.run_id}


class TestFirstFrameSize:
    async def test_widgets_on_screen_do_not_grow_with_the_runs(self) -> None:
        few_events, many_events = _session(600), _session(8_000)
        assert len(_runs(few_events)) >= 15 and len(_runs(many_events)) >= 250
        few = await _first_frame_facts(few_events)
        many = await _first_frame_facts(many_events)
        # The previous screen: ~7 widgets a run (2,187 here), growing with the session.
        assert many["widgets"] <= few["widgets"] + 5, (few["widgets"], many["widgets"])
        assert many["widgets"] < 150, many["widgets"]
        for facts in (few, many):
            assert facts["newest tab shown"] and facts["active"], "the newest run is not shown"
            assert facts["panes"] == [facts["last"]], "only the shown run has a pane"
            assert facts["tabs"] == facts["runs"], "every run has its tab, in order"


class TestRunTabs:
    async def test_keys_and_clicks_pick_a_run_and_mount_its_pane_once(self) -> None:
        events = _session(3_000)
        run_ids = _runs(events)
        lines = {rid: [line for e in events if isinstance(e, ev.RunOutput) and e.run_id == rid
                       for line in e.lines] for rid in run_ids}
        app = _app(events)
        async with app.run_test(size=SIZE) as pilot:
            await _first_frame(pilot)
            runs = app.live.query_one(RunsPanel)
            runs.tabs.focus()
            await pilot.press("left")
            await until(pilot, lambda: runs.active_log() is not None
                        and runs.active_run_id == run_ids[-2])
            log = runs.active_log()
            assert log is not None
            await until(pilot, lambda: log.visible_text() != [])
            # A finished older run's log: the end of what it printed (as the model holds it).
            want = [ln for ln in lines[run_ids[-2]]][-len(log.visible_text()):]
            assert log.visible_text() == want
            assert set(runs.panes) == {run_ids[-1], run_ids[-2]}
            assert not runs.panes[run_ids[-1]].display, "the other pane is hidden"

            await pilot.press("home")
            await until(pilot, lambda: runs.active_run_id == run_ids[0])
            strip = "\n".join(screen_lines(app))
            assert RunPane.tab_label(app.model.runs[run_ids[0]]) in strip, "strip not scrolled"

            # A click on a visible tab picks that run.
            shown, _ = runs.tabs._layout(runs.tabs.size.width)
            x0, x1, target, _label = shown[1]
            await pilot.click(runs.tabs, offset=((x0 + x1) // 2, 0))
            await until(pilot, lambda: runs.active_run_id == target)
            await pilot.press("right")  # the strip has focus after the click too
            await until(pilot, lambda: runs.active_run_id == run_ids[run_ids.index(target) + 1])

    async def test_a_load_of_many_runs_redraws_the_strip_once(self, monkeypatch: Any) -> None:
        """Each run the load started redrew the strip twice (its tab added, then made the
        active one): 180 redraws at 90 runs before the first frame; the batch's one does it."""
        from portside.tui.widgets.run_tabs import RunTabs

        events = _session(3_000)
        redraws: list[str | None] = []
        refresh = RunTabs.refresh

        def spy(tabs: RunTabs, *args: Any, **kwargs: Any) -> Any:
            redraws.append(tabs.active)
            return refresh(tabs, *args, **kwargs)

        monkeypatch.setattr(RunTabs, "refresh", spy)
        app = _app(events)
        async with app.run_test(size=SIZE) as pilot:
            await _first_frame(pilot)
            runs = app.live.query_one(RunsPanel)
            started = _runs(events)  # from the log, not the screen
            assert len(started) >= 50
            assert runs.tabs.run_ids == started and runs.active_run_id == started[-1]
            assert RunPane.tab_label(app.model.runs[started[-1]]) in "\n".join(screen_lines(app))
            # (Textual's own refreshes of the strip at its mount come before any run: None.)
            asked = [r for r in redraws if r is not None]
            assert len(asked) <= 3, len(asked)

    async def test_a_finished_run_relabels_its_tab(self, harness: Any) -> None:
        app = harness.app()
        async with app.run_test(size=SIZE) as pilot:
            for e in (session_start(), run_started("cand-1", "candidate", 1, 1),
                      run_output("cand-1", train_lines(5), 2)):
                harness.bus.publish(e)
            await until(pilot, lambda: "cand#1 ●" in "\n".join(screen_lines(app)))
            harness.bus.publish(ev.RunFinished(session_id=session_start().session_id,
                                               run_id="cand-1", exit_code=0, outcome="passed",
                                               wall_s=1.0))
            await until(pilot, lambda: "cand#1 ✓" in "\n".join(screen_lines(app)))


class TestStyledOnce:
    async def test_the_footer_is_one_widget_and_cards_are_styled_once_each(
            self, monkeypatch: Any) -> None:
        """Restyling a widget costs ~1 ms: Textual's footer mounted and styled a widget per key
        (three times each, before ReviewFooter's first fix), and each card was styled once
        more per newer card (selected, then not)."""
        from collections import Counter

        from textual.css.stylesheet import Stylesheet

        from portside.tui.widgets.diff_card import DiffCard
        from portside.tui.widgets.footer import ReviewFooter

        styled: Counter[int] = Counter()
        apply = Stylesheet.apply

        def spy(sheet: Stylesheet, node: Any, *args: Any, **kwargs: Any) -> None:
            if isinstance(node, ReviewFooter | DiffCard):
                styled[id(node)] += 1
            apply(sheet, node, *args, **kwargs)

        monkeypatch.setattr(Stylesheet, "apply", spy)
        app = _app(_session(3_000))
        async with app.run_test(size=SIZE) as pilot:
            await _first_frame(pilot)
            footer = app.screen.query_one(ReviewFooter)
            cards = list(app.screen.query(DiffCard))
            assert cards and not footer.children
            assert styled[id(footer)] <= 2, styled[id(footer)]
            # The newest card is the selected one; a card restyled on selection: twice at most.
            assert max(styled[id(c)] for c in cards) <= 2, [styled[id(c)] for c in cards]
            assert cards[-1].selected and not any(c.selected for c in cards[:-1])


class TestOneLayout:
    async def test_the_load_is_laid_out_once(self, monkeypatch: Any) -> None:
        """After the load, the layout that draws the first frame asks for no second one (the
        virtual sizes it sets, the log's and the Agent column's scrollbars used to)."""
        from textual.screen import Screen

        app = _app(_session(3_000))
        relayouts: list[bool] = []
        update = Screen._on_timer_update

        def spy(screen: Screen[Any]) -> None:
            if screen is app.screen and not app._batch_count:
                relayouts.append(screen._layout_required)
            update(screen)

        monkeypatch.setattr(Screen, "_on_timer_update", spy)
        async with app.run_test(size=SIZE) as pilot:
            await _first_frame(pilot)
            transcript = app.live.query_one(AgentColumn)
            await until(pilot, lambda: not transcript.uncoloured)
            await pilot.pause()
            assert relayouts and not any(relayouts), relayouts


async def _transcript_at_its_end(pilot: Any, app: Any) -> AgentColumn:
    """The first frame's Agent column, once it has scrolled to its end."""
    await _first_frame(pilot)
    transcript = app.live.query_one(AgentColumn)
    await until(pilot, lambda: transcript.max_scroll_y > 0
                and transcript.scroll_y == transcript.max_scroll_y)
    return transcript


class TestHeldTranscript:
    async def test_older_entries_mount_when_scrolled_to(self) -> None:
        events = _session(3_000)
        app = _app(events)
        async with app.run_test(size=SIZE) as pilot:
            # At its end, as the live screen was: the session's last agent words in view.
            transcript = await _transcript_at_its_end(pilot, app)
            last = [e for e in events if isinstance(e, ev.AgentText)
                    and e.seq < app.replayer.position][-1]
            assert any(last.text in line for line in screen_lines(app))
            held = len(transcript.older)
            mounted = len(transcript.children)
            assert held > 0 and mounted < held + mounted, "the whole window was mounted"
            first = transcript.children[0]
            await until(pilot, lambda: transcript.max_scroll_y > 0)
            transcript.scroll_home(animate=False)
            await until(pilot, lambda: len(transcript.older) == max(0, held - agent_column_widget.HELD_CHUNK))
            await until(pilot, lambda: len(transcript.children) == mounted + held
                        - len(transcript.older))
            # The entries that were at the top stay where the reviewer was reading.
            await until(pilot, lambda: transcript.scroll_y > 0)
            await pilot.pause()
            assert first.region.y - transcript.region.y <= transcript.size.height

    async def test_the_load_follows_the_column_once_and_ends_at_its_end(
            self, monkeypatch: Any) -> None:
        """Each entry the load added queued its own follow of the column's end (~75 at the
        bench's point, each a scroll to the end): one follow does it, after the refresh."""
        events = _session(3_000)
        follows: list[int] = []
        follow = AgentColumn._follow

        def spy(transcript: AgentColumn, tries: int = 20) -> None:
            if tries == 20:  # a follow queued, not a retry of one not laid out yet
                follows.append(len(transcript.children))
            follow(transcript, tries)

        monkeypatch.setattr(AgentColumn, "_follow", spy)
        app = _app(events)
        async with app.run_test(size=SIZE) as pilot:
            await _transcript_at_its_end(pilot, app)
            # Ground truth from the log: the load folds dozens of the column's entries.
            shown = [e for e in events if isinstance(e, ev.AgentText | ev.AgentToolCall)
                     and e.seq < app.replayer.position]
            assert len(shown) > 20
            assert 1 <= len(follows) <= 2, follows
            last = shown[-1]
            if isinstance(last, ev.AgentText):
                assert any(last.text in line for line in screen_lines(app))

    async def test_the_column_is_laid_out_with_its_scrollbar(self, monkeypatch: Any) -> None:
        """The mounted entries overflow the column: its scrollbar is there from the first
        layout of those entries (it used to be added by that layout, which then laid out the
        whole screen once more)."""
        from textual.screen import Screen

        app = _app(_session(3_000))
        at_layout: list[bool] = []
        layout = Screen._refresh_layout

        def spy(screen: Screen[Any], size: Any = None, scroll: bool = False) -> None:
            transcript = next(iter(screen.query(AgentColumn)), None)
            if transcript is not None and transcript.children and not scroll:
                at_layout.append(transcript.show_vertical_scrollbar)
            layout(screen, size, scroll)

        monkeypatch.setattr(Screen, "_refresh_layout", spy)
        async with app.run_test(size=SIZE) as pilot:
            await _first_frame(pilot)
            transcript = app.live.query_one(AgentColumn)
            # Ground truth: the column's content is taller than the column.
            assert transcript.virtual_size.height > transcript.scrollable_content_region.height
            assert at_layout and all(at_layout), at_layout

    async def test_a_scrollbar_set_ahead_goes_when_nothing_overflows(self) -> None:
        # A terminal taller than the held estimate's rows: no scrollbar is left standing.
        app = _app(_session(3_000))
        async with app.run_test(size=(120, 160)) as pilot:
            await _first_frame(pilot)
            transcript = app.live.query_one(AgentColumn)
            await until(pilot, lambda: transcript.max_scroll_y > 0 or not transcript.older)
            await pilot.pause()
            overflows = transcript.virtual_size.height > transcript.size.height
            assert transcript.show_vertical_scrollbar == overflows

    async def test_a_taller_column_mounts_what_fills_it(self) -> None:
        app = _app(_session(3_000))
        async with app.run_test(size=SIZE) as pilot:
            await _first_frame(pilot)
            transcript = app.live.query_one(AgentColumn)
            assert transcript.older
            await pilot.resize_terminal(120, 160)
            # Held entries stay reachable: they are mounted until the column can scroll.
            await until(pilot, lambda: transcript.max_scroll_y > 0 or not transcript.older)
            await pilot.pause()
            assert transcript.max_scroll_y > 0 or not transcript.older


class TestHeldColour:
    async def test_diffs_drawn_plain_get_their_colour_after_the_first_frame(self) -> None:
        from portside.tui import diffing
        from portside.tui.widgets.diff_card import DiffCard

        diffing._BUILT.clear()  # as in a fresh process: the Python lexer not built yet
        events = _session(3_000)
        app = _app(events)
        async with app.run_test(size=SIZE) as pilot:
            await _first_frame(pilot)
            cards = [c for c in app.live.query(DiffCard)]
            assert cards, "no diff on the first frame"
            transcript = app.live.query_one(AgentColumn)
            await until(pilot, lambda: not transcript.uncoloured)
            await pilot.pause()
            for card in cards:
                assert card.diff.colour
                # The ground truth: the lexer's own colouring of the file's new text; its
                # token styles are in the card's rows (a plain row has gutter and diff
                # backgrounds only).
                want = diffing.highlight_lines("\n".join(card.diff.b), card.diff.path)
                tokens = {str(span.style) for t in want for span in t.spans}
                got = {str(span.style) for row in card.body.rows(False, True).left
                       for span in row.spans}
                assert tokens and tokens <= got, (tokens, got)


class _HeldSource(SequenceSource):
    """The session's events, whose index is handed over only once the test lets it: the
    replay is still opening (in its thread) for as long as the test needs."""

    def __init__(self, events: list[ev.Event], release: threading.Event) -> None:
        super().__init__(events)
        self.release = release

    def index_arrays(self) -> IndexArrays:
        assert self.release.wait(60), "the test never let the index through"
        return super().index_arrays()


def _held_app(events: list[ev.Event], release: threading.Event) -> Any:
    """The replay app opening the session at its last alarm, its index held until `release`."""
    source = _HeldSource(events, release)
    return make_replay_app(PendingOpening(source, lambda: _at_last_alarm(source)),
                           session_id="many", autoplay=False)


def _at_last_alarm(source: SequenceSource) -> Replayer:
    replayer = Replayer(source, speed=1)
    replayer.seek(replayer.resolve_from("alarm:last") - 1)
    return replayer


class TestLoadingFrame:
    async def test_the_screen_shows_the_header_and_a_loading_line_until_the_replay_opens(
            self) -> None:
        events = _session(3_000)
        started = next(e for e in events if isinstance(e, ev.SessionStarted))
        where = f"{Path(started.project).name} → {started.target}"  # the header's, from the log
        newest = _runs(events)[-1]
        release = threading.Event()
        app = _held_app(events, release)
        frames: list[tuple[bool, list[str]]] = []  # (opened yet, the screen) per frame drawn
        display = app._display

        def seen(screen: Any, renderable: Any) -> None:
            display(screen, renderable)
            if renderable is not None and screen is app.screen:
                frames.append((app.loaded, screen_lines(app)))

        app._display = seen  # type: ignore[method-assign]
        try:
            async with app.run_test(size=SIZE) as pilot:
                await until(pilot, lambda: frames)
                await pilot.press("space")  # a key while it loads: a notice, nothing else
                await until(pilot, lambda: any("still loading" in n.message
                                               for n in app._notifications))
                assert not app.opening.future.done() and not app.model.runs
                release.set()
                await _first_frame(pilot)
                await pilot.pause()
                shown = screen_lines(app)
        finally:
            release.set()
        loading = [lines for opened, lines in frames if not opened]
        assert loading, "no frame was drawn before the replay opened"
        for lines in loading:  # never blank: the header and the loading line, each frame
            assert where in lines[0], lines[:3]
            assert "replay ⋯ loading" in lines[0], lines[:3]
            assert any("loading…" in line for line in lines[1:4]), lines[:4]
        # Then the session itself, at the point it opened at.
        text = "\n".join(shown)
        assert where in shown[0] and "replay ⏸" in shown[0], shown[:3]
        assert "loading…" not in text
        assert RunPane.tab_label(app.model.runs[newest]) in text
        assert app.replayer.position == _at_last_alarm(SequenceSource(events)).position

    async def test_an_opening_landed_before_the_screen_draws_the_session_first(self) -> None:
        # `portside replay` begins the opening before the screen's imports: mostly it is in
        # by the mount, and then the first frame is the session at its point, not "loading…".
        events = _session(3_000)
        newest = _runs(events)[-1]
        replayer = Replayer(SequenceSource(events), speed=1)
        replayer.seek(replayer.resolve_from("alarm:last") - 1)
        opening = PendingOpening.of(replayer)
        opening.result(60)
        app = make_replay_app(opening, session_id="many", autoplay=False)
        frames: list[list[str]] = []
        display = app._display

        def seen(screen: Any, renderable: Any) -> None:
            display(screen, renderable)
            if renderable is not None and screen is app.screen:
                frames.append(screen_lines(app))

        app._display = seen  # type: ignore[method-assign]
        async with app.run_test(size=SIZE) as pilot:
            await _first_frame(pilot)
            await until(pilot, lambda: frames)
        first = "\n".join(frames[0])
        assert "loading" not in first, frames[0][:4]
        assert RunPane.tab_label(app.model.runs[newest]) in first

    async def test_an_opening_landing_after_the_mount_draws_the_session_first(self) -> None:
        # The opening still in its thread at the mount, in before the loading frame's
        # deadline: no loading frame (drawn at once, it cost a whole layout and paint, and the
        # session's frame came ~0.3 s later); the first frame drawn is the session at its point.
        events = _session(3_000)
        newest = _runs(events)[-1]
        release = threading.Event()
        app = _held_app(events, release)
        app.loading_frame_s = 60.0  # a loaded machine's stall must not reach it here
        frames: list[tuple[bool, list[str]]] = []
        display = app._display
        mounted_open = threading.Event()  # set when the mount began with the opening still out

        def let_through() -> None:
            # Once the mount holds its frames (or 5 s on, where it never does), the index.
            deadline = time.monotonic() + 5
            while not app._held and time.monotonic() < deadline:
                time.sleep(0.001)
            if not app.opening.future.done():
                mounted_open.set()
            release.set()

        def seen(screen: Any, renderable: Any) -> None:
            display(screen, renderable)
            if renderable is not None and screen is app.screen:
                frames.append((app.loaded, screen_lines(app)))

        app._display = seen  # type: ignore[method-assign]
        helper = threading.Thread(target=let_through, daemon=True)
        helper.start()
        try:
            async with app.run_test(size=SIZE) as pilot:
                await _first_frame(pilot)
                await until(pilot, lambda: frames)
        finally:
            release.set()
            helper.join(10)
        assert mounted_open.is_set(), "the opening was in before the mount: nothing shown here"
        opened, first = frames[0]
        assert opened and "loading" not in "\n".join(first), first[:4]
        assert RunPane.tab_label(app.model.runs[newest]) in "\n".join(first)
