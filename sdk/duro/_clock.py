"""The one clock. Nothing else in duro reads the wall clock (a ruff banned-api rule enforces it).

A clock answers ``now_ms()`` (milliseconds since the Unix epoch, UTC), ``sleep_until(ms)`` and
``monotonic_ms()`` (a clock that never jumps: what a worker measures its lease on). The system clock
uses real time; the harness injects a simulated one with the same three methods.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Protocol, overload


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def sleep_until(self, due_ms: int) -> Awaitable[None]:
        """Something to await until ``due_ms`` (a coroutine, or a future the clock resolves)."""

    def monotonic_ms(self) -> int:
        """Milliseconds on a clock that only moves forward (its origin means nothing)."""


_BOOTTIME = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


class SystemClock:
    """Real time. ``sleep_until`` re-checks after waking so a long sleep never ends early."""

    def now_ms(self) -> int:
        """Milliseconds since the epoch, from the system's real-time clock."""
        return time.time_ns() // 1_000_000

    async def sleep_until(self, due_ms: int) -> None:
        """Sleep until ``due_ms`` on this clock (never less)."""
        # to the nanosecond, not the millisecond: a due time is not missed by most of a millisecond
        # (the loop's own timer rounds up to one already); when it ends, now_ms() >= due_ms
        due_ns = due_ms * 1_000_000
        while (left := due_ns - time.time_ns()) > 0:
            await asyncio.sleep(left / 1e9)

    def monotonic_ms(self) -> int:
        """Linux's CLOCK_BOOTTIME where there is one: unlike CLOCK_MONOTONIC it keeps counting while
        the machine is suspended, and a worker whose machine slept past its lease must know it."""
        return time.clock_gettime_ns(_BOOTTIME) // 1_000_000


def pause(seconds: float) -> None:
    """Block this thread briefly (a retry's back-off in synchronous store code; never in a test)."""
    time.sleep(seconds)


@overload
def ms_to_datetime(ms: int) -> datetime: ...
@overload
def ms_to_datetime(ms: None) -> None: ...
@overload
def ms_to_datetime(ms: int | None) -> datetime | None: ...
def ms_to_datetime(ms: int | None) -> datetime | None:
    """Milliseconds since the epoch as an aware UTC datetime (``None`` stays ``None``)."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, tz=UTC)


def datetime_to_ms(value: datetime) -> int:
    """An aware datetime (a naive one is taken as UTC) as milliseconds since the epoch."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return round(value.timestamp() * 1000)
