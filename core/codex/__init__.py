"""Codex CLI: live under review through its app-server, and its rollouts imported."""
