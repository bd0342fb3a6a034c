"""portside's domain: events, probe, runner, checks, agent, session engine (no Textual, no SQLite)."""

__version__ = "0.1.0"
