"""Rate decisions, pure: no I/O and no clock. The store applies each decision in one transaction.

A rate allows ``limit`` (in costs) per window of ``per_ms``: **the costs granted in any window of
length ``per_ms`` add up to at most ``limit``**, per key on a keyed rate. Instants are integer
milliseconds, windows half-open: grants at ``a`` and ``b`` share a window exactly when
``|a - b| < per_ms``. So a grant of ``cost`` may be made at ``t`` when the grants after ``t -
per_ms`` plus ``cost`` stay within ``limit`` (every window holding ``t`` holds no grant made before
``t - per_ms`` + 1, and none is ever made after ``t`` while ``t`` is decided).

Waiters of one (rate, key) form a FIFO queue: the head is granted at the earliest instant the window
allows (and not before a pause ends), and a later waiter never passes an earlier one, even with a
smaller cost. A waiter whose cost exceeds the limit in effect (an operator lowered it) waits until
the limit is raised again, or its own timeout.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple


class Grant(NamedTuple):
    """One grant as the window counts it: when, and its cost."""

    at: int
    cost: int


class RateView(NamedTuple):
    """What a decision needs of one (rate, key): the limit in effect, the window and a pause."""

    name: str
    limit: int
    per_ms: int
    paused_until: int | None = None


class Waiter(NamedTuple):
    """One ``acquire_rate`` in its queue: ``pos`` orders the queue of its (rate, key)."""

    id: str
    pos: int
    cost: int
    timeout_at: int | None = None


def in_window(grants: Iterable[Grant], per_ms: int, at: int) -> list[Grant]:
    """The grants a grant at ``at`` would share a window with, oldest first (none after ``at``)."""
    return sorted((g for g in grants if at - per_ms < g.at <= at), key=lambda g: g.at)


def earliest(view: RateView, grants: Sequence[Grant], cost: int, now: int) -> int | None:
    """The earliest instant from ``now`` at which ``cost`` may be granted, given the grants made so
    far (none after ``now``); ``None`` if it never fits (``cost`` above the limit in effect)."""
    if cost > view.limit:
        return None
    start = now if view.paused_until is None else max(now, view.paused_until)
    recent = in_window(grants, view.per_ms, start)
    used = sum(g.cost for g in recent)
    at = start
    for oldest in recent:  # each grant leaves the window per_ms after it was made
        if used + cost <= view.limit:
            break
        used -= oldest.cost
        at = max(at, oldest.at + view.per_ms)
    return at


class Decision(NamedTuple):
    """The waiters granted now (each with its instant, ``now``) and when the new head is due."""

    granted: list[tuple[Waiter, int]]
    next_due: int | None  # when the head left waiting may be granted (None: no head, or never fits)


def grant_due(view: RateView, grants: Sequence[Grant], queue: Sequence[Waiter], now: int) -> Decision:
    """Grant the queue's heads, in order, while the window allows each one now; then say when the
    next head is due. ``queue`` is the (rate, key)'s waiters in ``pos`` order; ``grants`` its grants
    so far (only those of the last ``per_ms`` matter)."""
    made = list(grants)
    granted: list[tuple[Waiter, int]] = []
    for waiter in queue:
        due = earliest(view, made, waiter.cost, now)
        if due is None or due > now:
            return Decision(granted, due)
        granted.append((waiter, now))
        made.append(Grant(now, waiter.cost))
    return Decision(granted, None)


def window_use(grants: Iterable[Grant], per_ms: int, now: int) -> int:
    """The costs granted in the window ending at ``now`` (what operators see as used)."""
    return sum(g.cost for g in grants if now - per_ms < g.at <= now)
