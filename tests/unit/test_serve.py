"""`portside serve`'s command line for the served app (cli/serve.py); the browser test is in
tests/tui/test_serve_browser.py."""

from __future__ import annotations

import shlex
import sys

import click
import pytest

from portside.cli.serve import app_command, free_port


def test_app_command_runs_this_portside_with_the_arguments_quoted():
    cmd = app_command(["run", "./my proj", "--reference", "python train.py; rm -rf ~"],
                      db="/tmp/a b.db")
    assert shlex.split(cmd) == [sys.executable, "-m", "portside.cli", "--db", "/tmp/a b.db",
                                "run", "./my proj", "--reference", "python train.py; rm -rf ~"]


@pytest.mark.parametrize("args", [[], ["export", "last"], ["serve", "run"],
                                  ["run", "--headless"], ["replay", "last", "--json"]])
def test_app_command_refuses_what_has_no_screen(args):
    with pytest.raises(click.UsageError):
        app_command(args)


def test_free_port_is_on_loopback_and_bindable():
    import socket

    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_db_before_the_served_command_is_serves(monkeypatch, tmp_path):
    """`portside serve --db X replay last` was refused (--db was taken for the served
    command's name); --db works after any subcommand elsewhere."""
    from click.testing import CliRunner

    from portside.cli import serve as serve_mod
    from portside.cli.main import main

    started: list[str] = []

    class Idle:
        def serve(self) -> None:
            pass

    monkeypatch.setattr(serve_mod, "make_server",
                        lambda command, port, token: started.append(command) or Idle())
    db = tmp_path / "x.db"
    res = CliRunner().invoke(main, ["serve", "--db", str(db), "replay", "last"])
    assert res.exit_code == 0, res.output
    assert shlex.split(started[0])[3:] == ["--db", str(db), "replay", "last"]
