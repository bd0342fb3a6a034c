"""`portside serve run ...` in a real headless Chromium, driven over the DevTools protocol: the
served app loads in the page, a key pressed in the page approves the agent's edit, and the
intervention row is in SQLite. Also: what the server refuses (no token, a foreign Origin)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_run import cli_popen

REPO = Path(__file__).resolve().parents[2]
TINY = REPO / "tests" / "fixtures" / "trainers" / "train_tiny.py"
AGENT = [
    {"say": "Scripted agent here: tightening the clip."},
    {"edit": {"path": "train_tiny.py", "old": "max_norm=args.max_norm",
              "new": "max_norm=0.05", "rationale": "match the TPU recipe"}},
    {"claim": "done"},
]


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        found = shutil.which(name)
        if found:
            return found
    return None


def _stop(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM, wait: float = 20) -> None:
    """The process group of ``proc`` (started with its own session), gently then for sure."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, sig)
        proc.wait(timeout=wait)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path, subprocess.Popen[str]]]:
    """`portside serve run` on a tiny real trainer with a scripted agent: (url, db, process)."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "train_tiny.py").write_text(TINY.read_text())
    script = tmp_path / "agent.jsonl"
    script.write_text("\n".join(json.dumps(step) for step in AGENT) + "\n")
    db = tmp_path / "serve.db"
    py = shlex.quote(sys.executable)
    ref = f"{py} train_tiny.py --steps 20"
    proc = cli_popen("serve", "run", str(project), "--agent", f"scripted:{script}",
                     "--reference", ref, "--target", "cpu", "--reference-runs", "1",
                     "--stall", "60", db=db, cwd=tmp_path, stderr=subprocess.STDOUT,
                     start_new_session=True)
    try:
        url = None
        deadline = time.monotonic() + 60
        seen = []
        assert proc.stdout is not None
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            if not line:
                break
            seen.append(line)
            m = re.search(r"portside serve: (http://127\.0\.0\.1:\d+/\?token=\S+)", line)
            if m:
                url = m.group(1)
                break
        assert url, f"serve printed no URL: {''.join(seen)}"
        yield url, db, proc
    finally:
        _stop(proc)


class CDP:
    """A minimal DevTools client: one page target, commands by id, events collected."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.next_id = 0

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        my_id = self.next_id
        await self.ws.send_json({"id": my_id, "method": method, "params": params})
        while True:
            msg = await asyncio.wait_for(self.ws.receive_json(), 30)
            if msg.get("id") == my_id:
                if "error" in msg:
                    raise RuntimeError(f"{method}: {msg['error']}")
                return msg.get("result", {})

    async def js(self, expr: str) -> Any:
        out = await self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        return out.get("result", {}).get("value")

    async def key(self, char: str) -> None:
        code = f"Key{char.upper()}"
        vk = ord(char.upper())
        await self.call("Input.dispatchKeyEvent", type="keyDown", key=char, code=code,
                        text=char, unmodifiedText=char, windowsVirtualKeyCode=vk)
        await self.call("Input.dispatchKeyEvent", type="keyUp", key=char, code=code,
                        windowsVirtualKeyCode=vk)


def _browser(tmp_path: Path) -> tuple[subprocess.Popen[bytes], int]:
    exe = chromium()
    assert exe is not None
    profile = tmp_path / "chromium-profile"
    proc = subprocess.Popen(
        [exe, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-extensions", "--disable-background-networking", "--window-size=1400,900",
         f"--user-data-dir={profile}", "--remote-debugging-address=127.0.0.1",
         "--remote-debugging-port=0", "about:blank"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if port_file.exists() and port_file.read_text().strip():
            return proc, int(port_file.read_text().split()[0])
        if proc.poll() is not None:
            raise AssertionError(f"chromium exited with {proc.returncode}")
        time.sleep(0.2)
    _stop(proc)
    raise AssertionError("chromium opened no DevTools port in 60 s")


def _db_rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    if not db.exists():
        return []
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql).fetchall()
    except sqlite3.OperationalError:  # the schema is not there yet
        return []
    finally:
        conn.close()


async def _wait(cond: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return value
        await asyncio.sleep(0.3)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


pytestmark = [pytest.mark.slow,  # a real server, a headless Chromium and a session each
              pytest.mark.skipif(chromium() is None,
                                 reason="chromium is not installed (apt-get install chromium; "
                                        ".ci/run installs it)")]


async def test_served_app_in_chromium_approves_an_edit(served, tmp_path: Path) -> None:
    import aiohttp

    url, db, serve_proc = served
    browser, port = _browser(tmp_path)
    try:
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/json/list") as r:
                targets = await r.json()
            page = next(t for t in targets if t.get("type") == "page")
            async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                cdp = CDP(ws)
                await cdp.call("Page.enable")
                await cdp.call("Page.navigate", url=url)
                # The app's first bytes reached the page: textual.js marks the body.
                await _wait(lambda: cdp.js("document.body.classList.contains('-first-byte')"),
                            60, "the served app to draw in the page")
                # The edit awaits the reviewer (the engine wrote it to the log) ...
                await _wait(lambda: _db_rows(db, "SELECT seq FROM events WHERE kind = "
                                                 "'edit.proposed'"), 240, "the agent's edit")
                await asyncio.sleep(1.5)  # ... and has been on screen a moment
                # While the page holds the app, a second connection (a second session) is
                # refused, even with the cookie and the right Origin.
                base, token = url.split("/?")[0], url.split("token=")[1]
                with pytest.raises(aiohttp.WSServerHandshakeError) as second:
                    async with http.ws_connect(f"{base}/ws", headers={
                            "Origin": base, "Cookie": f"portside_serve={token}"}):
                        pass
                assert second.value.status == 409
                shot = await cdp.call("Page.captureScreenshot", format="png")
                (tmp_path / "served.png").write_bytes(base64.b64decode(shot["data"]))
                # A key press in the page (focus on the terminal first) approves it.
                await cdp.js("document.querySelector('.xterm-helper-textarea')?.focus()")
                await cdp.key("a")
                rows = await _wait(lambda: _db_rows(
                    db, "SELECT action, target_id FROM interventions"), 30,
                    "the approval in SQLite")
                assert rows[0][0] == "approve", rows
                edit_ids = [json.loads(b)["edit_id"] for (b,) in _db_rows(
                    db, "SELECT body FROM events WHERE kind = 'edit.proposed'")]
                assert rows[0][1] in edit_ids
                await cdp.key("q")  # the reviewer leaves: the served app ends its session
                await _wait(lambda: _db_rows(db, "SELECT reason FROM sessions WHERE reason "
                                                 "IS NOT NULL AND reason != ''"), 60,
                            "the session to end")
                await cdp.call("Page.captureScreenshot", format="png")
    finally:
        _stop(browser, wait=10)
    assert serve_proc.poll() is None  # the server outlives one session; the fixture stops it


async def test_serve_refuses_without_token_or_from_another_origin(served) -> None:
    import aiohttp

    url, _db, _proc = served
    base = url.split("/?")[0]
    token = url.split("token=")[1]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{base}/") as r:
            assert r.status == 403
        async with http.get(f"{base}/ws") as r:
            assert r.status == 403  # no cookie: no app
        async with http.get(f"{base}/?token={token}") as r:
            assert r.status == 200 and "textual.js" in await r.text()
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            async with http.ws_connect(f"{base}/ws", headers={
                    "Origin": "http://evil.test", "Cookie": f"portside_serve={token}"}):
                pass
        assert err.value.status == 403


def test_serve_listens_on_loopback_only(served) -> None:
    url, _db, proc = served
    port = int(re.search(r":(\d+)/", url).group(1))
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout \
        if shutil.which("ss") else ""
    if out:
        listening = [line.split()[3] for line in out.splitlines() if f":{port} " in line + " "]
        assert listening and all(addr.startswith("127.0.0.1:") for addr in listening), out
    import socket

    # Not reachable on another address of this machine.
    others = {ai[4][0] for ai in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET)}
    for addr in others - {"127.0.0.1"}:
        with socket.socket() as s, pytest.raises(OSError):
            s.settimeout(2)
            s.connect((addr, port))


async def _first_bytes(http: Any, base: str, token: str, origin: str) -> Any:
    """Open the app's websocket as the page would; returns it once the app has drawn."""
    ws = await http.ws_connect(f"{base}/ws?width=100&height=30", headers={
        "Origin": origin, "Cookie": f"portside_serve={token}"})
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        msg = await asyncio.wait_for(ws.receive(), 60)
        if msg.type.name == "BINARY" and msg.data:
            return ws
        assert msg.type.name in ("BINARY", "TEXT"), msg
    raise AssertionError("the served app drew nothing in 60 s")


async def test_serve_accepts_localhost_as_its_own_origin(served) -> None:
    """It listens on 127.0.0.1; http://localhost:PORT is the same server to the user (it was
    refused 403). Another port on localhost is still another origin."""
    import aiohttp

    url, _db, _proc = served
    base, token = url.split("/?")[0], url.split("token=")[1]
    port = int(base.rsplit(":", 1)[1])
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await http.ws_connect(f"{base}/ws", headers={
                "Origin": f"http://localhost:{port + 1}", "Cookie": f"portside_serve={token}"})
        assert err.value.status == 403
        ws = await _first_bytes(http, base, token, f"http://localhost:{port}")
        await ws.close()


async def test_a_tab_opened_right_after_one_closed_is_served(served) -> None:
    """Closing a tab ends its app, which takes seconds (its session stops its runs): a tab
    opened meanwhile got 409 (the slot was held until the old app exited); it waits its turn
    and is served. A tab opened while another is open is still refused."""
    import aiohttp

    url, _db, _proc = served
    base, token = url.split("/?")[0], url.split("token=")[1]
    async with aiohttp.ClientSession() as http:
        first = await _first_bytes(http, base, token, base)
        await first.close()
        second = await _first_bytes(http, base, token, base)
        with pytest.raises(aiohttp.WSServerHandshakeError) as third:
            await http.ws_connect(f"{base}/ws", headers={
                "Origin": base, "Cookie": f"portside_serve={token}"})
        assert third.value.status == 409
        await second.close()


async def test_the_splash_says_the_app_is_starting(served) -> None:
    """Until the app's first frame (its process starts per tab: seconds of imports) the page
    showed only textual-serve's splash with the word "portside" (issue 27 item 2, serve)."""
    import aiohttp

    url, _db, _proc = served
    async with aiohttp.ClientSession() as http, http.get(url) as page:
        html = await page.text()
    assert page.status == 200
    assert "starting the app" in html and "longer on a busy machine" in html, html[-1500:]
