"""A database as an older portside left it: the schema's first ``version`` migrations only."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import sqlite_utils

from portside.store.schema import MIGRATIONS


def database_at(path: Path, version: int) -> sqlite3.Connection:
    """A connection (autocommit) to a new file at schema ``version``; the caller fills it with
    what that version wrote (the ground truth of a migration test) and closes it."""
    conn = sqlite3.connect(path, isolation_level=None)
    db = sqlite_utils.Database(conn)
    conn.execute("BEGIN")
    for m in MIGRATIONS[:version]:
        m(db)
    conn.execute(f"PRAGMA user_version = {version}")
    conn.execute("COMMIT")
    return conn
