"""`portside serve <run|replay|demo|sessions|attach> ...`: the same app in a browser tab.

textual-serve runs ``python -m portside.cli <args>`` under Textual's web driver for each browser
connection and relays the screen over a websocket. It listens on 127.0.0.1 only, on a free port
chosen at start (printed): reach it from another machine through an SSH port forward, never by
binding a public address. Two guards stand in for the login textual-serve does not have:

- a random token in the printed URL; the page sets it as a SameSite=Strict, HttpOnly cookie and
  the websocket that drives the app demands it (another local user, or a page that guessed the
  port, gets 403);
- the websocket's Origin must be this server (as 127.0.0.1 or as localhost, the same
  loopback socket to the user), so a web page open in the same browser cannot drive the
  session (approve an edit) through the reviewer's cookie.

One app at a time: each connection would start its own session, so a second tab is refused
(409) while the first is open. A tab opened just after one closed waits for that tab's app to
finish ending its session (it may take seconds to stop its runs), then gets its own.
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import secrets
import shlex
import socket
import sys
from collections.abc import Sequence
from typing import Any

import click

HOST = "127.0.0.1"
COOKIE = "portside_serve"
COMMANDS = ("run", "replay", "demo", "sessions", "attach")
SPLASH = "portside · starting the app (a few seconds; longer on a busy machine)…"
# How long a new tab waits for the app of a tab just closed to end before it is refused.
ENDING_WAIT_S = 60.0


def allowed_origins(port: int) -> frozenset[str]:
    """The Origins of this server's own page: the host it listens on, and localhost (which
    resolves to that same loopback address for the user typing it)."""
    return frozenset({f"http://{HOST}:{port}", f"http://localhost:{port}"})


class _Tab:
    """One browser tab's hold on the app: released once, when its websocket closes or its
    handler ends, whichever is first."""

    def __init__(self, tabs: set[_Tab]) -> None:
        self.tabs = tabs
        tabs.add(self)

    def release(self) -> None:
        self.tabs.discard(self)


_CURRENT_TAB: contextvars.ContextVar[_Tab | None] = contextvars.ContextVar(
    "portside_serve_tab", default=None)


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

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.tabs: set[_Tab] = set()  # the tabs whose websocket is open
            self.app_ended = asyncio.Event()  # no app process is running (or ending)
            self.app_ended.set()

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
                if origin is not None and origin not in allowed_origins(self.port):
                    raise web.HTTPForbidden(text=f"origin {origin} is not this server\n")
                return await self._one_tab(request, handler)
            raise web.HTTPNotFound()

        async def _one_tab(self, request: web.Request, handler: Any) -> web.StreamResponse:
            """Serve the tab while no other is open; after the app of a tab just closed ends."""
            if self.tabs:
                raise web.HTTPConflict(text="portside serve: another browser tab holds this "
                                            "session (one tab at a time); close it, then "
                                            "reload this page\n")
            tab = _Tab(self.tabs)
            try:
                try:
                    await asyncio.wait_for(self.app_ended.wait(), ENDING_WAIT_S)
                except TimeoutError:
                    raise web.HTTPConflict(text="the last tab's session is still ending; "
                                                "try again\n") from None
                self.app_ended.clear()
                _CURRENT_TAB.set(tab)
                try:
                    return await handler(request)
                finally:
                    self.app_ended.set()
            finally:
                tab.release()

        async def _process_messages(self, websocket: Any, app_service: Any) -> None:
            # textual-serve returns from here when the tab's websocket closes, then waits for
            # the app to end: the tab is gone from then on, so a new one may queue behind it.
            try:
                await super()._process_messages(websocket, app_service)
            finally:
                if (tab := _CURRENT_TAB.get()) is not None:
                    tab.release()

        def initialize_logging(self) -> None:
            super().initialize_logging()
            # One access-log line per page, asset and websocket flooded the terminal that
            # shows the URL; errors still come through.
            logging.getLogger("aiohttp.access").setLevel(logging.WARNING)

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

    # The name is all textual-serve's splash shows until the app's first frame (its process
    # starts per tab: seconds of imports, more on a busy machine): say what it waits for.
    return GuardedServer(command, host=HOST, port=port, title=SPLASH)


def usable_port(port: int) -> int:
    """``port`` if it can be listened on (else a usage error: the server died in a traceback
    after printing a URL that another program answered), or a free one for 0."""
    if not port:
        return free_port()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as aiohttp binds it
        try:
            s.bind((HOST, port))
        except OSError as exc:
            raise click.BadParameter(f"{HOST}:{port}: {exc.strerror}", param_hint="--port"
                                     ) from None
    return port


def serve(args: Sequence[str], db: str | None = None, port: int = 0) -> None:
    command = app_command(args, db)
    server = make_server(command, usable_port(port), secrets.token_urlsafe(24))
    server.serve()
