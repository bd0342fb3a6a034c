"""Runs at once on one machine: at most `width`, started in the order they asked.

The order is taken when a run asks (synchronously, `ask()`), not when its task first gets the
loop: references queued together keep their numbers, and a candidate that asks after them
never overtakes one (it is judged against them; they are not judged against it).
"""

from __future__ import annotations

import asyncio
from collections import deque


class RunSlots:
    def __init__(self, width: int) -> None:
        self.width = max(1, width)
        self.running = 0
        self._queue: deque[asyncio.Future[None]] = deque()

    def ask(self) -> asyncio.Future[None]:
        """A place in the queue (call inside the loop): done when the run may start."""
        turn: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(turn)
        self._admit()
        return turn

    async def wait(self, turn: asyncio.Future[None]) -> None:
        try:
            await turn
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():  # admitted as it was cancelled
                self.release()
            raise

    def release(self) -> None:
        self.running -= 1
        self._admit()

    def _admit(self) -> None:
        while self._queue and self.running < self.width:
            turn = self._queue.popleft()
            if turn.done():  # cancelled while waiting
                continue
            self.running += 1
            turn.set_result(None)
