"""Which waiting runs a worker keeps in memory: pure decisions, no I/O and no clock of their own.

A run that waits (a sleep, a signal, a slot's queue, a child, a retry's delay) is *parked*: its
coroutine sits at one await and could be replayed anywhere from the store. Keeping it resident costs
memory (about 10 KB a run in a ``duro worker``); unloading it costs a replay when it wakes. The rules:

- a timer that ends later than ``unload_after`` from now is unloaded at once: nothing can wake it
  earlier but its cancellation, and it would sit in memory for all that time;
- any other wait (a signal, a slot, a child: what ends it can come at any moment) stays resident for
  ``unload_after``, then goes: a quick reply finds the run still in memory, a slow one costs a replay;
- a worker holds at most ``max_resident`` runs: over that, the parked runs that have been idle the
  longest go first (executing runs are never unloaded);
- ``unload_after=None`` (the harness): waits are unloaded only over ``max_resident``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple


class Parked(NamedTuple):
    """A parked run as the worker sees it: when it parked (on the monotonic clock), the kind of its
    wait (``sleep``, ``signal``, ``slot``, ``child``), when the wait ends by itself (wall clock
    milliseconds; ``None``: it does not) and what else ends it (``store.Waiting.key``)."""

    run_id: str
    since: int
    kind: str
    due_at: int | None
    key: str | None = None


def unload_at_once(parked: Parked, now: int, unload_after_ms: int | None) -> bool:
    """Whether a run that parks now goes at once: a timer due later than ``unload_after`` from now."""
    if unload_after_ms is None or parked.kind != "sleep" or parked.due_at is None:
        return False
    return parked.due_at - now > unload_after_ms


def idle_too_long(parked: Parked, monotonic_now: int, unload_after_ms: int | None) -> bool:
    """Whether a parked run has waited in memory for ``unload_after`` already."""
    return unload_after_ms is not None and monotonic_now - parked.since >= unload_after_ms


def over_capacity(parked_oldest_first: Iterable[Parked], resident: int, max_resident: int) -> list[str]:
    """The parked runs to unload so that at most ``max_resident`` stay resident: the longest idle
    first. ``resident`` counts every run in memory (executing and parked); executing runs stay, so
    a worker over its bound with nothing parked unloads nothing."""
    excess = resident - max_resident
    if excess <= 0:
        return []
    chosen: list[str] = []
    for parked in parked_oldest_first:
        if len(chosen) >= excess:
            break
        chosen.append(parked.run_id)
    return chosen


def next_idle_deadline(parked_oldest_first: Iterable[Parked], unload_after_ms: int | None) -> int | None:
    """When (monotonic) the oldest parked run that waits on an event will have been idle too long."""
    if unload_after_ms is None:
        return None
    for parked in parked_oldest_first:
        return parked.since + unload_after_ms
    return None
