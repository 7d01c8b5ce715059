"""A simulated clock: time moves only when a test advances it, and due sleepers wake in time order."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from datetime import UTC, datetime, timedelta

from duro._clock import datetime_to_ms, ms_to_datetime
from duro._durations import Duration, to_ms

DEFAULT_START = datetime(2030, 1, 1, tzinfo=UTC)


async def settle(rounds: int = 3, limit: int = 10_000) -> None:
    """Let every task that can make progress do so: yield until the loop has nothing ready."""
    loop = asyncio.get_running_loop()
    quiet = 0
    for _ in range(limit):
        await asyncio.sleep(0)
        ready = getattr(loop, "_ready", None)
        if ready is not None and len(ready) > 0:
            quiet = 0
            continue
        quiet += 1
        if quiet >= rounds:
            return


class SimulatedClock:
    """Implements duro's clock protocol (``now_ms``, ``sleep_until``) on simulated time.

    ``await clock.advance("3d")`` fires every sleeper due on the way, in time order (ties in the
    order they went to sleep), letting tasks settle after each one.
    """

    def __init__(self, start: datetime | int = DEFAULT_START) -> None:
        self._now = start if isinstance(start, int) else datetime_to_ms(start)
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now_ms(self) -> int:
        return self._now

    @property
    def now(self) -> datetime:
        return ms_to_datetime(self._now)  # type: ignore[return-value]

    async def sleep_until(self, due_ms: int) -> None:
        if due_ms <= self._now:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (due_ms, next(self._order), future))
        await future

    def next_due(self) -> int | None:
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    def _wake_due(self) -> None:
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

    async def advance(self, duration: Duration | timedelta) -> None:
        await self.advance_to(self._now + to_ms(duration, "advance"))

    async def advance_to(self, instant: datetime | int) -> None:
        target = instant if isinstance(instant, int) else datetime_to_ms(instant)
        await settle()
        while (due := self.next_due()) is not None and due <= target:
            self._now = max(self._now, due)
            self._wake_due()
            await settle()
        self._now = max(self._now, target)
        await settle()
