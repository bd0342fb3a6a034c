"""Wire an engine's references to the database it records into: a reference whose key is
stored there (a passed, sealed run of the same project, command, seed and environment) is
reused instead of run again (core/session/reference_reuse.py), unless the session was started
with --fresh-references (``session.started`` meta ``fresh_references``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

fresh_option = click.option(
    "--fresh-references", "fresh_references", is_flag=True,
    help="Run every reference afresh, even where a stored one of the same project, command, "
         "seed and environment could be reused.")


def reuse_references(engine: Any, store: Any) -> None:
    from portside.core.session.reference_reuse import ReferenceReuse
    from portside.store.reference_runs import StoredReferences

    config = engine.config
    # Where the session's own folder is (never inside the project: default_workdir); the
    # cache is shared by the sessions under one work root.
    workdir = Path(engine.workdir)
    root = (workdir.parent if config.work_root
            and workdir.parent == Path(config.work_root).absolute() else workdir)
    engine.verifier.reuse = ReferenceReuse(
        Path(config.project), StoredReferences(store.path),
        cache_file=root / "interpreters.json",
        fresh=bool(config.meta.get("fresh_references")))
