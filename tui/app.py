"""The one app factory, used by `portside run`, the demo, replay and the tests.

    make_app(bus=engine.bus, gate=engine.gate, info=engine.info, engine_run=engine.run).run()

On mount the app subscribes to the bus (the subscriber only queues the event and posts a
Message: it may be called from any thread) and starts ``engine_run`` as a worker whose failure is
shown, never raised. Events already in the log (``history``) are rendered first.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import threading
import time
from collections.abc import Awaitable, Callable
from typing import IO, Any

from textual import on
from textual.app import App
from textual.binding import Binding
from textual.driver import Driver
from textual.message import Message
from textual.worker import Worker, WorkerState

from portside.core.log import events as ev
from portside.core.log.bus import EventBus
from portside.core.session.review import ReviewGate

from .commands import ReviewCommands
from .messages import EventsApplied, EventsArrived
from .model import SessionModel
from .screens.review import ReviewScreen
from .screens.review_keys import COMPARE_TOOLTIP

ENGINE_WORKER = "engine"
#: After SIGTERM/SIGHUP, how long the engine has to end in order (runs aborted and recorded)
#: before the app exits regardless.
SIGNAL_GRACE_S = 5.0


class TerminalGone(Message):
    """The terminal stopped taking output (hung up): the app ends, its runs are stopped."""


class _DroppingOutput:
    """The terminal file Textual's writer thread writes to, once the terminal may be gone.

    A hung-up tty fails every write with EIO; Textual's writer thread does not catch it and
    dies, its queue (30 writes) fills, and the app's next write blocks for ever in Queue.put:
    the process outlived its terminal (issue 24 item 12). Here a failed write is dropped and
    the app is told once; nothing is written after that."""

    def __init__(self, file: IO[str], on_gone: Callable[[], None]) -> None:
        self._file = file
        self._on_gone = on_gone
        self.gone = False

    def _lost(self) -> None:
        if not self.gone:
            self.gone = True
            self._on_gone()

    def write(self, text: str) -> int:
        if not self.gone:
            try:
                return self._file.write(text)
            except (OSError, ValueError):  # EIO/EPIPE, or closed
                self._lost()
        return len(text)

    def flush(self) -> None:
        if not self.gone:
            try:
                self._file.flush()
            except (OSError, ValueError):
                self._lost()

    def fileno(self) -> int:
        return self._file.fileno()

    def isatty(self) -> bool:
        return not self.gone and self._file.isatty()


def _post(app: App[Any], message: Message) -> None:
    app.post_message(message)  # thread-safe: the writer thread tells the app


def _hangup_safe(base: type[Driver]) -> type[Driver]:
    """``base`` (Textual's Linux driver) writing through _DroppingOutput, and not restarting
    the screen on the SIGCONT a hangup sends with its SIGHUP (Ctrl-Z then fg still works)."""

    class HangupSafeDriver(base):  # type: ignore[valid-type,misc]
        def __init__(self, app: App[Any], **kwargs: Any) -> None:
            super().__init__(app, **kwargs)
            self._output = _DroppingOutput(self._file,  # type: ignore[has-type]
                                           lambda: _post(app, TerminalGone()))
            self._file = self._output

        def _sigcont_application(self, *args: Any) -> None:
            signalled: str = getattr(self._app, "signalled", "")
            if self._output.gone or signalled:
                return  # the SIGCONT of a hangup: there is no screen to restart
            super()._sigcont_application(*args)

    return HangupSafeDriver


class PortsideApp(App[None]):
    CSS_PATH = "portside.tcss"
    TITLE = "portside"
    COMMANDS = App.COMMANDS | {ReviewCommands}
    BINDINGS = [
        Binding("question_mark", "help", "Help", id="app.help", key_display="?",
                tooltip="Show every key and what it does"),
        Binding("q", "quit", "Quit", id="app.quit",
                tooltip="Leave portside (the session log is already on disk)"),
        Binding("c", "compare", "Compare", id="app.compare", tooltip=COMPARE_TOOLTIP),
    ]

    def __init__(self, *, bus: EventBus, gate: ReviewGate, info: dict[str, Any],
                 engine_run: Callable[[], Awaitable[None]] | None = None, mode: str = "live",
                 history: list[ev.Event] | None = None, clock: Callable[[], float] = time.time,
                 engine_stop: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.bus = bus
        self.gate = gate
        self.info = info
        self.mode = mode
        self.engine_run = engine_run
        self.engine_stop = engine_stop
        self.clock = clock
        self.model = SessionModel(info)
        self.live = ReviewScreen(self.model, gate, mode=mode, clock=clock)
        self._history = list(history or [])
        self._inbox: list[ev.Event] = []
        self._inbox_lock = threading.Lock()
        self._posted = False
        self._last_history_seq = max((e.seq for e in self._history), default=0)
        self._unsubscribe: Callable[[], None] | None = None
        self.engine_error: BaseException | None = None
        self.signalled = ""  # the signal (SIGTERM, SIGHUP) that ends the app, once one came
        self.terminal_gone = False
        # What ends the engine when the terminal is gone (a hangup); default: engine_stop.
        self.on_terminal_gone: Callable[[], None] | None = None
        self._engine_done = engine_run is None
        # Called once mounted, with the app: work that must not hold the first frame.
        self.on_started: Callable[[PortsideApp], None] | None = None

    def get_driver_class(self) -> type[Driver]:
        base = super().get_driver_class()
        try:
            from textual.drivers.linux_driver import LinuxDriver
        except ImportError:  # not POSIX
            return base
        return _hangup_safe(base) if base is LinuxDriver else base

    # --- ending without a reviewer: a signal, the terminal gone ------------------------------

    def end_by_signal(self, name: str) -> None:
        """Called from a signal handler (SIGTERM, SIGHUP): the app exits once the engine has
        ended in order (the caller stopped it), or after SIGNAL_GRACE_S regardless."""
        self.signalled = self.signalled or name
        with contextlib.suppress(RuntimeError):  # no loop: the app is not running
            asyncio.get_running_loop().call_soon_threadsafe(self._exit_soon)

    def _exit_soon(self) -> None:
        if self._engine_done:
            self.exit()
        else:
            self.set_timer(SIGNAL_GRACE_S, self.exit)

    @on(TerminalGone)
    def _terminal_gone(self) -> None:
        self.terminal_gone = True
        stop = self.on_terminal_gone or self.engine_stop
        if stop is not None and not self.signalled:
            stop()  # no SIGHUP handler did it (yet)
        self.signalled = self.signalled or "terminal gone"
        self._exit_soon()

    # --- wiring ------------------------------------------------------------------------------

    async def on_mount(self) -> None:
        # Subscribe first: anything published meanwhile waits in the inbox, after the history.
        self._unsubscribe = self.bus.subscribe(self._on_bus_event)
        await self.push_screen(self.live)
        if self._history:
            self.live.apply(self._history)
            self.live.flush()
        if self.on_started is not None:
            self.on_started(self)
        # After the first frame: the engine's first stretch (workspace copy, sandbox probe,
        # spawning the references) runs on this loop without awaiting, and the warm-up's
        # imports hold the GIL; either one before it held the first frame (~4 s of 5.6 s at load
        # 4.5 per core, tests/tui/test_tmux_demo.py).
        self.call_after_refresh(self._start_after_first_frame)

    def _start_after_first_frame(self) -> None:
        if not self.live.is_attached:  # the app is ending already (a signal, a test's exit)
            return
        if self.engine_run is not None:
            self.run_worker(self.engine_run(), name=ENGINE_WORKER, group=ENGINE_WORKER,
                            exit_on_error=False)
        if self.WARM_UP_ON_MOUNT:
            self.start_warm_up()

    # A replay starts it after its first frame: the thread's imports hold the GIL (~0.4 s).
    WARM_UP_ON_MOUNT = True

    def start_warm_up(self) -> None:
        self.run_worker(_warm_up, name="warm-up", thread=True, exit_on_error=False)

    def on_unmount(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        gc.unfreeze()  # what _warm_up froze may be collected again once the app is gone

    def _on_bus_event(self, event: ev.Event) -> None:
        """Runs on the publisher's thread: queue and wake the app, nothing else."""
        with self._inbox_lock:
            self._inbox.append(event)
            if self._posted:
                return
            self._posted = True
        self.post_message(EventsArrived())

    def discard_inbox(self) -> None:
        """Drop events queued but not yet shown (a replay seek rebuilds the screen instead)."""
        with self._inbox_lock:
            self._inbox = []

    @on(EventsArrived)
    def _drain(self) -> None:
        with self._inbox_lock:
            batch, self._inbox = self._inbox, []
            self._posted = False
        if self._last_history_seq:
            # An event both in the history and delivered live is shown once.
            batch = [e for e in batch if not e.seq or e.seq > self._last_history_seq]
        if not batch:
            return
        self.live.apply(batch)
        self.post_message(EventsApplied(len(batch), batch[-1].seq))

    @on(Worker.StateChanged)
    def _worker_changed(self, event: Worker.StateChanged) -> None:
        """The one place a failure of background work is reported."""
        worker = event.worker
        if event.state == WorkerState.ERROR:
            self.engine_error = worker.error
            reason = f"{type(worker.error).__name__}: {worker.error}"
            if worker.name == ENGINE_WORKER:
                self.model.state = "engine failed"
                self.live.show_failure(f"engine failed: {reason}")
            else:
                self.notify(reason, title=f"{worker.name} failed", severity="error", timeout=60)
        elif event.state == WorkerState.SUCCESS and worker.name == ENGINE_WORKER:
            self.notify("the session engine finished", timeout=5)
        if worker.name == ENGINE_WORKER and event.state in (
                WorkerState.SUCCESS, WorkerState.ERROR, WorkerState.CANCELLED):
            self._engine_done = True
            if self.signalled:
                self.exit()  # ended by a signal: nobody is there to read the result

    # --- app-wide actions --------------------------------------------------------------------

    def action_help(self) -> None:
        if isinstance(self.screen, ReviewScreen) or hasattr(self.screen, "HELP_TITLE"):
            self.screen.action_help()  # type: ignore[attr-defined]

    def action_compare(self) -> None:
        if isinstance(self.screen, ReviewScreen):
            self.screen.action_compare()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "compare":  # only the live and replay screens compare (hidden elsewhere)
            return isinstance(self.screen, ReviewScreen)
        return True

    async def _on_exit_app(self) -> None:
        # Every way out passes here. A browser tab closing reaches the app only as this
        # ("quit" from textual-serve): it is the reviewer closing portside, as `q` is, not a
        # cancelled engine (its worker is cancelled next). A signal or a hangup said its own.
        if self.engine_stop is not None and not self.signalled and not self._engine_done:
            try:
                self.engine_stop()
            except Exception as exc:  # quitting must always work
                self.log.error(f"engine stop failed: {exc}")
        await super()._on_exit_app()

    async def action_quit(self) -> None:
        if self.engine_stop is not None:
            try:
                self.engine_stop()
            except Exception as exc:  # quitting must always work
                self.log.error(f"engine stop failed: {exc}")
        self.exit()


def _warm_up() -> None:
    """Start-up work kept off the UI thread: pygments' lexer imports (else the first diff pays
    them), then freezing the heap built so far. Every full collection would otherwise walk
    Textual's, pygments' and the screen's ~100k long-lived objects, a pause of 50-150 ms that
    a flood of log lines triggers every second or so; frozen, they are never scanned."""
    from .diffing import highlight_lines

    highlight_lines("import os\n", "warm.py")
    gc.collect()
    gc.freeze()


def make_app(*, bus: EventBus, gate: ReviewGate, info: dict[str, Any],
             engine_run: Callable[[], Awaitable[None]] | None = None, mode: str = "live",
             history: list[ev.Event] | None = None, clock: Callable[[], float] = time.time,
             engine_stop: Callable[[], None] | None = None) -> PortsideApp:
    """The app for a session: live (an engine publishing on ``bus``) or over ``history``."""
    return PortsideApp(bus=bus, gate=gate, info=info, engine_run=engine_run, mode=mode,
                       history=history, clock=clock, engine_stop=engine_stop)
