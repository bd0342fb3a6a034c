"""Untrusted text on the terminal, and secrets kept out of runs and the record."""
