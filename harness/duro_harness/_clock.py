"""A simulated clock: time moves only when a test advances it, and due sleepers wake in time order."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta

from duro.tooling import datetime_to_ms, duration_ms, ms_to_datetime

DEFAULT_START = datetime(2030, 1, 1, tzinfo=UTC)


async def settle(rounds: int = 2, limit: int = 1_000_000) -> None:
    """Yield until every task that can make progress has: the loop has nothing ready, twice running.

    Deterministic by construction: duro's engine under the harness does all its work on the loop
    (SQLite inline, sync steps inline), so "nothing ready" means every run waits on time or on input.
    """
    loop = asyncio.get_running_loop()
    quiet = 0
    for _ in range(limit):
        await asyncio.sleep(0)
        ready = getattr(loop, "_ready", None)
        if ready:
            quiet = 0
            continue
        quiet += 1
        if quiet >= rounds:
            return
    raise RuntimeError("the runs did not settle: something keeps scheduling work without waiting")


class SimulatedClock:
    """Implements duro's clock protocol (``now_ms``, ``sleep_until``, ``monotonic_ms``) on simulated time.

    Time moves only through :meth:`set` (the harness's ``advance`` calls it once per due timer) or
    :meth:`advance`. Sleepers due at the same instant wake in the order they went to sleep.
    ``listeners`` are told every new instant (the harness moves freezegun's time with it).
    """

    def __init__(self, start: datetime | int = DEFAULT_START) -> None:
        self._now = start if isinstance(start, int) else datetime_to_ms(start)
        self._sleepers: list[tuple[int, int, asyncio.Future[None]]] = []
        self._order = itertools.count()
        self.listeners: list[Callable[[int], None]] = []

    def now_ms(self) -> int:
        return self._now

    def monotonic_ms(self) -> int:
        """Simulated time never goes back: leases are measured on it too."""
        return self._now

    @property
    def now(self) -> datetime:
        return ms_to_datetime(self._now)

    def sleep_until(self, due_ms: int) -> Awaitable[None]:
        if due_ms <= self._now:
            return asyncio.sleep(0)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (due_ms, next(self._order), future))
        return future

    def next_due(self) -> int | None:
        """The earliest instant a sleeper waits for (cancelled sleepers are dropped)."""
        while self._sleepers and self._sleepers[0][2].done():
            heapq.heappop(self._sleepers)
        return self._sleepers[0][0] if self._sleepers else None

    def pending(self) -> int:
        return sum(1 for *_, future in self._sleepers if not future.done())

    def set(self, instant_ms: int) -> None:
        """Move to ``instant_ms`` (never backwards) and wake every sleeper due by then, in order."""
        if instant_ms > self._now:
            self._now = instant_ms
            for listener in self.listeners:
                listener(instant_ms)
        while self._sleepers and self._sleepers[0][0] <= self._now:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)

    async def advance(self, duration: str | int | timedelta) -> None:
        """Standalone use (without the harness env): fire due sleepers in order up to now + duration."""
        await self.advance_to(self._now + duration_ms(duration, "advance"))

    async def advance_to(self, instant: datetime | int, idle: Callable[[], Awaitable[None]] = settle) -> None:
        target = instant if isinstance(instant, int) else datetime_to_ms(instant)
        await idle()
        while (due := self.next_due()) is not None and due <= target:
            self.set(due)
            await idle()
        self.set(target)
        await idle()
