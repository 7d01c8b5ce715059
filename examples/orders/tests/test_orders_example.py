"""The orders example under simulated time: a 7-day signal timeout and a restart, in milliseconds."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from duro import Engine
from duro_harness import SimulatedClock

PROJECT = Path(__file__).resolve().parents[1]
ORDER = {"id": "A-1", "customer": "ada", "items": {"lamp": 2}}


def engine_on(tmp_path: Path, clock: SimulatedClock) -> Engine:
    return Engine.from_project(PROJECT, database_url=f"sqlite:///{tmp_path / 'orders.db'}", clock=clock,
                               poll_interval=None)


async def test_an_order_is_delivered(tmp_path):
    clock = SimulatedClock(datetime(2030, 1, 1, tzinfo=UTC))
    async with engine_on(tmp_path, clock) as engine:
        handle = await engine.start("fulfil_order", ORDER)
        await clock.advance("1s")
        assert await handle.status() == "suspended"
        await handle.signal("delivered", True)
        await clock.advance("1ms")
        receipt = await handle.result()
        assert (receipt.payment, receipt.tracking, receipt.delivered) == ("pay_A-1_9000", "trk_A-1", True)
        assert [s.name for s in await handle.steps()] == [
            "price_order", "charge_payment", "sleep", "book_courier", "delivered"]


async def test_an_undelivered_order_times_out_after_seven_days_even_across_a_restart(tmp_path):
    clock = SimulatedClock(datetime(2030, 1, 1, tzinfo=UTC))
    async with engine_on(tmp_path, clock) as engine:
        handle = await engine.start("fulfil_order", ORDER)
        await clock.advance("3d")
        assert await handle.status() == "suspended"
    async with engine_on(tmp_path, clock) as engine:
        await clock.advance("4d")  # the wait began 1 s after the start (after the cool-off sleep)
        assert await engine.handle(handle.id).status() == "suspended"
        await clock.advance("1s")
        receipt = await engine.handle(handle.id).result()
        assert receipt.delivered is False
