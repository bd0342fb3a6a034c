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
