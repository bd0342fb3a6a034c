"""Stdlib scripts that run in *other* processes (a subreaper, the SSH side); never imported by portside, read and shipped by path."""
