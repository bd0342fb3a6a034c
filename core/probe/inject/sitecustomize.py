"""portside probe bootstrap (this directory is put first on PYTHONPATH by portside).

Does nothing unless PORTSIDE_PROBE_OUT is set. Loads the probe from ../_probe.py by file path
(stdlib only here, so it works in any Python env, with or without portside installed), then
runs the sitecustomize this file shadows, if there is one further along sys.path.
"""

import os
import sys


def _load(flag: str, name: str, file: str, what: str) -> None:
    """Load ../<file> as module ``name`` and activate it, only when ``flag`` is set in the
    environment (off means not even imported); a failure never breaks the user's program."""
    if not os.environ.get(flag) or name in sys.modules:
        return
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), file)
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
        mod.activate()
    except Exception as e:  # never break the user's program
        sys.stderr.write(f"portside {what}: disabled ({type(e).__name__}: {e})\n")


def _chain() -> None:
    """Run the next sitecustomize on sys.path (only entries after this directory)."""
    import importlib.machinery
    import importlib.util

    here = os.path.dirname(os.path.abspath(__file__))
    absolute = [os.path.abspath(p or os.getcwd()) for p in sys.path]
    start = absolute.index(here) + 1 if here in absolute else 0
    rest = [sys.path[i] for i in range(start, len(sys.path)) if absolute[i] != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    mod = importlib.util.module_from_spec(spec)
    sys.modules["_portside_chained_sitecustomize"] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception as e:  # what site.py itself does with a failing sitecustomize
        sys.stderr.write(
            f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(e).__name__}: {e}\n"
        )


# The probe first, so torch imported by a chained sitecustomize is patched too; trace mode
# (PORTSIDE_TRACE_OUT, FORMAT.md) only for `portside localize`.
_load("PORTSIDE_PROBE_OUT", "_portside_probe", "_probe.py", "probe")
_load("PORTSIDE_TRACE_OUT", "_portside_trace", "trace.py", "trace")
_chain()
