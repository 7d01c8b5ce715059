"""Each limit's busy and waiting counts over time (Studio's chart), and a ``limits`` event on the
live stream whenever they change.

The monitor samples the limits every 5 s and soon after any run event (a slot granted, released,
expired...) or operator change, at most every 250 ms, publishes ``limits`` when anything of a limit
changed (counts, capacity, max hold, overrides), and keeps 24 hours of points per limit in memory: the chart
starts empty when the server starts. ``busy`` in a point counts held and reserved slots alike
(both count against capacity).
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

from .api._common import store_down_errors
from .api.models import LimitOut
from .source import EngineSource, ProjectUnavailable

SAMPLE_SECONDS = 5.0
THROTTLE_SECONDS = 0.25
KEEP_POINTS = 24 * 3600 // 5


class LimitsMonitor:
    def __init__(self, source: EngineSource) -> None:
        self._source = source
        self._points: dict[str, deque[tuple[int, int, int]]] = {}
        self._last: list[dict[str, Any]] | None = None
        self._task: asyncio.Task[None] | None = None
        self._poked = asyncio.Event()

    def poke(self) -> None:
        """Sample soon: something changed (an operator's override, a release...)."""
        self._poked.set()

    def history(self, limit: str, since_ms: int) -> list[tuple[int, int, int]]:
        return [point for point in self._points.get(limit, ()) if point[0] >= since_ms]

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="duro-limits-monitor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        with self._source.hub.subscribe() as queue:
            while True:
                waiters = [asyncio.ensure_future(queue.get()), asyncio.ensure_future(self._poked.wait())]
                _, pending = await asyncio.wait(
                    waiters, timeout=SAMPLE_SECONDS, return_when=asyncio.FIRST_COMPLETED
                )
                for waiter in pending:
                    waiter.cancel()
                self._poked.clear()
                while not queue.empty():
                    queue.get_nowait()
                await self.sample()
                await asyncio.sleep(THROTTLE_SECONDS)

    async def sample(self) -> None:
        try:
            engine = self._source.engine
        except ProjectUnavailable:
            return
        try:
            infos = await engine.limits.list()
        except store_down_errors():
            return  # the store is busy or out of reach: no point this time, the next sample tries again
        now = engine.clock.now_ms()
        for info in infos:
            points = self._points.setdefault(info.name, deque(maxlen=KEEP_POINTS))
            points.append((now, info.busy + info.reserved, info.waiting))
        limits: list[dict[str, Any]] = [LimitOut.of(info).model_dump(mode="json") for info in infos]
        if limits != self._last:  # counts, capacities, max holds and overrides alike
            self._last = limits
            self._source.hub.publish("limits", {"limits": limits})
