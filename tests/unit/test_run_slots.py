"""RunSlots: at most `width` runs at once, admitted in the order they asked (a candidate that
asks after queued references never overtakes one), and a cancelled waiter frees its place."""

from __future__ import annotations

import asyncio

from portside.core.session.run_slots import RunSlots


def test_admitted_in_the_order_asked_never_more_than_width() -> None:
    async def go() -> tuple[list[str], int]:
        slots = RunSlots(2)
        order: list[str] = []
        most = 0

        async def run(name: str, turn: asyncio.Future[None], hold: float) -> None:
            nonlocal most
            await slots.wait(turn)
            order.append(name)
            most = max(most, slots.running)
            await asyncio.sleep(hold)
            slots.release()

        # Asked now, in this order; their tasks get the loop later, the candidate's first.
        turns = {name: slots.ask() for name in ("ref1", "ref2", "ref3", "cand")}
        await asyncio.gather(run("cand", turns["cand"], 0.0), run("ref3", turns["ref3"], 0.0),
                             run("ref1", turns["ref1"], 0.02), run("ref2", turns["ref2"], 0.05))
        return order, most

    order, most = asyncio.run(go())
    assert order == ["ref1", "ref2", "ref3", "cand"] and most == 2


def test_a_cancelled_waiter_gives_its_place_on() -> None:
    async def go() -> list[str]:
        slots = RunSlots(1)
        got: list[str] = []
        first, second, third = slots.ask(), slots.ask(), slots.ask()
        waiting = asyncio.ensure_future(slots.wait(second))
        await asyncio.sleep(0)
        waiting.cancel()  # gives up before its turn
        await asyncio.gather(waiting, return_exceptions=True)
        await slots.wait(first)
        got.append("first")
        slots.release()
        await asyncio.wait_for(slots.wait(third), 1.0)  # not stuck behind the cancelled one
        got.append("third")
        slots.release()
        return got + [str(slots.running)]

    assert asyncio.run(go()) == ["first", "third", "0"]
