"""Where the database lives: --db, then $PORTSIDE_DB, then the user data dir."""

from __future__ import annotations

import os
from pathlib import Path

import platformdirs


def default_db_path() -> Path:
    return Path(platformdirs.user_data_dir("portside", appauthor=False)) / "portside.db"


def resolve_db_path(explicit: str | os.PathLike[str] | None = None) -> Path:
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("PORTSIDE_DB")
    if env:
        return Path(env).expanduser()
    return default_db_path()
