"""`portside serve <run|replay|demo|sessions> ...`: the same app in a browser tab.

textual-serve runs ``python -m portside.cli <args>`` under Textual's web driver for each browser
connection and relays the screen over a websocket. It listens on 127.0.0.1 only, on a free port
chosen at start (printed): reach it from another machine through an SSH port forward, never by
binding a public address. Two guards stand in for the login textual-serve does not have:

- a random token in the printed URL; the page sets it as a SameSite=Strict, HttpOnly cookie and
  the websocket that drives the app demands it (another local user, or a page that guessed the
  port, gets 403);
- the websocket's Origin must be this server, so a web page open in the same browser cannot
  drive the session (approve an edit) through the reviewer's cookie.

One app at a time: each connection would start its own session, so a second tab is refused
while the first is open.
"""

from __future__ import annotations

import asyncio
import secrets
import shlex
import socket
import sys
from collections.abc import Sequence
from typing import Any

import click

HOST = "127.0.0.1"
COOKIE = "portside_serve"
COMMANDS = ("run", "replay", "demo", "sessions")


def free_port(host: str = HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def app_command(args: Sequence[str], db: str | None = None) -> str:
    """The shell command textual-serve starts per connection: this Python, this portside."""
    if not args or args[0] not in COMMANDS:
        raise click.UsageError(f"serve needs one of {', '.join(COMMANDS)} and its arguments, "
                               f"got {' '.join(args) or 'nothing'!r}")
    if "--headless" in args or "--json" in args:
        raise click.UsageError("serve shows the screen: drop --headless / --json")
    head = [sys.executable, "-m", "portside.cli", *(["--db", db] if db else [])]
    return shlex.join([*head, *args])


def make_server(command: str, port: int, token: str) -> Any:
    from aiohttp import web
    from textual_serve.server import Server

    class GuardedServer(Server):
        """textual-serve's server behind the token cookie, the Origin check, one app at once."""

        active = 0

        async def _make_app(self) -> web.Application:
            app = await super()._make_app()
            app.middlewares.append(self._guard)
            return app

        @web.middleware
        async def _guard(self, request: web.Request, handler: Any) -> web.StreamResponse:
            if request.path.startswith("/static/"):
                return await handler(request)  # the page's own js/css/fonts: nothing secret
            if request.path == "/":
                given = request.query.get("token", "") or request.cookies.get(COOKIE, "")
                if not secrets.compare_digest(given, token):
                    raise web.HTTPForbidden(text="portside serve: open the URL it printed "
                                                 "(with its token)\n")
                response = await handler(request)
                response.set_cookie(COOKIE, token, httponly=True, samesite="Strict", path="/")
                return response
            if request.path == "/ws":
                if not secrets.compare_digest(request.cookies.get(COOKIE, ""), token):
                    raise web.HTTPForbidden(text="no session cookie\n")
                origin = request.headers.get("Origin")
                if origin is not None and origin != self.public_url:
                    raise web.HTTPForbidden(text=f"origin {origin} is not this server\n")
                if GuardedServer.active:
                    raise web.HTTPConflict(text="a browser tab already holds this session\n")
                GuardedServer.active += 1
                try:
                    return await handler(request)
                finally:
                    GuardedServer.active -= 1
            raise web.HTTPNotFound()

        async def on_startup(self, app: web.Application) -> None:
            # Startup runs before the socket listens: print once it accepts, so the URL
            # printed always opens (instead of textual-serve's banner).
            app["announce"] = asyncio.get_running_loop().create_task(self._announce())

        async def _announce(self) -> None:
            for _ in range(600):
                try:
                    _, writer = await asyncio.open_connection(HOST, self.port)
                except OSError:
                    await asyncio.sleep(0.05)
                    continue
                writer.close()
                break
            print(f"portside serve: {self.public_url}/?token={token}", flush=True)
            print("  listening on 127.0.0.1 only; from another machine: "
                  f"ssh -L {self.port}:127.0.0.1:{self.port} <this host>  ·  ctrl+c stops",
                  flush=True)

    return GuardedServer(command, host=HOST, port=port, title="portside")


def serve(args: Sequence[str], db: str | None = None, port: int = 0) -> None:
    command = app_command(args, db)
    server = make_server(command, port or free_port(), secrets.token_urlsafe(24))
    server.serve()
