"""The agent seam (base.py), the registry, the built-in agents, and what every agent shares: the
stop check, the default task, an imported session's sealing."""
