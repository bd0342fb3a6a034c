"""portside's store: one SQLite file (WAL), an append-only event log and derived tables."""

from .paths import default_db_path, resolve_db_path
from .queries import Store
from .recorder import DatabaseGone, Recorder
from .schema import StoreError

__all__ = ["DatabaseGone", "Recorder", "Store", "StoreError", "default_db_path", "resolve_db_path"]
