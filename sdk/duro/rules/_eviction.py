"""Which waiting runs a worker keeps in memory: pure decisions, no I/O and no clock of their own.

A run that waits (a sleep, a signal, a slot's queue, a child, a retry's delay) is *idle*: its
coroutine sits at one await and could be replayed anywhere from the store. Keeping it resident costs
memory (about 10 KB a run in a ``duro worker``); eviction it costs a replay when it wakes. The rules:

- a timer that ends later than ``evict_after`` from now is evicted at once: nothing can wake it
  earlier but its cancellation, and it would sit in memory for all that time;
- any other wait (a signal, a slot, a child: what ends it can come at any moment) stays resident for
  ``evict_after``, then goes: a quick reply finds the run still in memory, a slow one costs a replay;
- a worker holds at most ``max_resident`` runs: over that, the idle runs that have been idle the
  longest go first (executing runs are never evicted);
- ``evict_after=None`` (the harness): waits are evicted only over ``max_resident``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


class IdleWait(NamedTuple):
    """An idle run as the worker sees it: when it went idle (on the monotonic clock), the kind of its
    wait (``sleep``, ``signal``, ``slot``, ``child``), when the wait ends by itself (wall clock
    milliseconds; ``None``: it does not) and what else ends it (``store.Waiting.key``)."""

    run_id: str
    since: int
    kind: str
    due_at: int | None
    key: str | None = None


def evict_at_once(idle: IdleWait, now: int, evict_after_ms: int | None) -> bool:
    """Whether a run that goes idle now goes at once: a timer due later than ``evict_after`` from now."""
    if evict_after_ms is None or idle.kind != "sleep" or idle.due_at is None:
        return False
    return idle.due_at - now > evict_after_ms


def idle_too_long(idle: IdleWait, monotonic_now: int, evict_after_ms: int | None) -> bool:
    """Whether an idle run has waited in memory for ``evict_after`` already."""
    return evict_after_ms is not None and monotonic_now - idle.since >= evict_after_ms


def over_capacity(idle_oldest_first: Iterable[IdleWait], resident: int, max_resident: int) -> list[str]:
    """The idle runs to evict so that at most ``max_resident`` stay resident: the longest idle
    first. ``resident`` counts every run in memory (executing and idle); executing runs stay, so
    a worker over its bound with nothing idle evicts nothing."""
    excess = resident - max_resident
    if excess <= 0:
        return []
    chosen: list[str] = []
    for idle in idle_oldest_first:
        if len(chosen) >= excess:
            break
        chosen.append(idle.run_id)
    return chosen


def next_idle_deadline(idle_oldest_first: Iterable[IdleWait], evict_after_ms: int | None) -> int | None:
    """When (monotonic) the oldest idle run that waits on an event will have been idle too long."""
    if evict_after_ms is None:
        return None
    for idle in idle_oldest_first:
        return idle.since + evict_after_ms
    return None
