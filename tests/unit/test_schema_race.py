"""Two processes opening a fresh database at once: each migration runs once (it re-reads the
version under the write lock), so neither fails with "table events already exists"."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

from portside.store.schema import MIGRATIONS, migrate


def test_openers_racing_on_a_fresh_database_each_migrate_it_once(tmp_path: Path) -> None:
    errors: list[BaseException] = []
    versions: list[int] = []
    for attempt in range(5):  # the race is a matter of timing: give it a few chances
        db = tmp_path / f"race{attempt}.db"
        start = threading.Barrier(4)

        def open_it(db: Path = db, start: threading.Barrier = start) -> None:
            conn = sqlite3.connect(db, timeout=30, isolation_level=None)
            try:
                start.wait()
                versions.append(migrate(conn, db))
            except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)
            finally:
                conn.close()

        threads = [threading.Thread(target=open_it) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors, errors
    assert versions == [len(MIGRATIONS)] * 20
