"""The sessions screen: the store's sessions, filter, sort, enter chooses one for replay."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import DataTable

from portside.core.log import events as ev
from portside.store import Store
from portside.tui.sessions_app import COLUMNS, SessionsApp


def _rows(tmp: Path) -> list[dict]:
    with Store(tmp / "s.db") as store:
        rec = store.recorder
        for sid, project, verdict, t in (("s-a", "/p/mnist", "fail", 100.0),
                                         ("s-b", "/p/resnet", "pass", 200.0),
                                         ("s-c", "/p/mnist", "pass", 300.0)):
            rec.append(ev.SessionStarted(session_id=sid, ts=t, project=project, target="tpu"))
            rec.append(ev.SessionEnded(session_id=sid, ts=t + 60, verdict=verdict))
        rec.append(ev.Intervention(session_id="s-a", intervention_id="i1", action="reject",
                                   steering=True, attention_started_at=110, decided_at=150))
        rec.flush()
        return store.sessions()


async def test_filter_sort_and_choose(tmp_path: Path) -> None:
    app = SessionsApp(_rows(tmp_path), "s.db")
    async with app.run_test(size=(140, 30)) as pilot:
        table = app.query_one(DataTable)
        assert table.row_count == 3
        # newest first by default
        assert str(table.coordinate_to_cell_key((0, 0)).row_key.value) == "s-c"
        await pilot.press("slash")
        await pilot.press(*"mnist")
        await pilot.pause()
        assert table.row_count == 2
        await pilot.press("enter")  # leave the filter box
        table.move_cursor(row=0, column=[k for k, _ in COLUMNS].index("interventions"))
        await pilot.press("s")
        await pilot.pause()
        assert str(table.coordinate_to_cell_key((0, 0)).row_key.value) == "s-a"
        await pilot.press("enter")
    assert app.return_value == "s-a"


async def test_visibility_stays_textuals(tmp_path: Path) -> None:
    """The app keeps Textual's `visible` (a bool property every widget's inherited visibility
    reads up to the app): a method of that name made it a bound method, so each widget's
    `visible` was a method too, and Textual's own `app.visible = False` replaced the method
    and broke the next refill."""
    app = SessionsApp(_rows(tmp_path), "s.db")
    async with app.run_test(size=(140, 30)) as pilot:
        table = app.query_one(DataTable)
        assert app.visible is True
        assert table.visible is True  # no rule of its own: inherited from the app
        app.visible = False  # Textual's setter: the whole tree hides
        assert table.visible is False and not table.focusable
        app.visible = True
        assert table.focusable
        await pilot.press("slash", *"resnet")
        await pilot.pause()
        assert table.row_count == 1


async def test_sessions_are_grouped_by_study(tmp_path: Path) -> None:
    """Sessions a study ran (session.started meta.study) sit together, each study's in the
    chosen order, the study and task in a column; sessions of no study after them."""
    from portside.store.study_log import session_studies

    with Store(tmp_path / "g.db") as store:
        for sid, t, study in (("x-1", 100.0, "alpha"), ("x-2", 200.0, None),
                              ("x-3", 300.0, "beta"), ("x-4", 400.0, "alpha")):
            meta = {"study": {"name": study, "task": f"t{sid[-1]}"}} if study else {}
            store.recorder.append(ev.SessionStarted(session_id=sid, ts=t, project="/p/m",
                                                    target="tpu", meta=meta))
        store.recorder.flush()
        rows = store.sessions()
        studies = session_studies(store)
    for r in rows:  # as `portside sessions` fills them
        if r["session_id"] in studies:
            r["study_name"], task = studies[r["session_id"]]
            r["study"] = f"{r['study_name']} · {task}"
    app = SessionsApp(rows, "g.db")
    async with app.run_test(size=(160, 30)):
        table = app.query_one(DataTable)
        order = [str(table.coordinate_to_cell_key((i, 0)).row_key.value) for i in range(4)]
        assert order == ["x-4", "x-1", "x-3", "x-2"]  # alpha newest first, beta, then none
        assert str(table.get_row("x-4")[-1]) == "alpha · t4"


async def test_cost_column_is_shows_total(tmp_path: Path) -> None:
    """Issue 41.7: the list said 0.00 where `show` said total $1.55 (human $ left out)."""
    from portside.cli.main import _listed
    from portside.store.exports import session_costs

    with Store(tmp_path / "s.db") as store:
        _rows(tmp_path)  # s-a: a reviewer's 40 s, no run, no token
        rows = _listed(store, session_costs)
        total = session_costs(store, "s-a")["total_usd"]
    assert total > 1.0  # 40 s at the default $100/h
    app = SessionsApp(rows, "s.db")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        table = app.query_one(DataTable)
        keys = [k for k, _ in app.columns]
        row = next(i for i in range(table.row_count)
                   if str(table.coordinate_to_cell_key((i, 0)).row_key.value) == "s-a")
        cell = table.get_cell_at((row, keys.index("cost")))
        assert str(cell) == f"{total:.2f}", (str(cell), total)
        title = str(table.ordered_columns[keys.index("cost")].label)
        assert "total" in title, title
