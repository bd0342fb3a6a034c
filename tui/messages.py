"""Every custom Message of the UI, in one place.

The bus delivers events on the publisher's thread; the only thing done there is to queue the
event and post :class:`EventsArrived` (thread safe). The app drains the queue on its own loop, so
a flood of run output becomes one message per drain, never one per line.
"""

from __future__ import annotations

from textual.message import Message


class EventsArrived(Message):
    """New events wait in the app's inbox; one of these is in flight at a time."""


class EventsApplied(Message):
    """The screen folded a batch of events into its model (tests and benchmarks wait on it)."""

    def __init__(self, count: int, last_seq: int) -> None:
        super().__init__()
        self.count = count
        self.last_seq = last_seq


class AlarmSelected(Message):
    """The reviewer highlighted an alarm in the Checks list."""

    def __init__(self, alarm_id: str) -> None:
        super().__init__()
        self.alarm_id = alarm_id
