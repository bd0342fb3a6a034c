"""What `attach` says at once: when to start `claude`.

The hooks are installed only once the references have run (the candidate is judged against
them at the claude session's Stop), so a `claude` started earlier works unreviewed. The
headless log and the live screen's Agent column say it in the same words.
"""

from __future__ import annotations


def wait_text(reference_runs: int | None = None) -> str:
    runs = ("the reference runs" if not reference_runs else
            f"{reference_runs} reference run{'s' if reference_runs != 1 else ''}")
    return (f"First {runs}, in a copy of the project: do not start `claude` yet. Its hooks "
            "are installed when they end, and portside says so (\"run `claude` in …\"); a "
            "`claude` started before that is not reviewed.")
