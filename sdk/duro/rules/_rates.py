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
    window = in_window(grants, view.per_ms, now)
    return due(view, sum(g.cost for g in window), window, cost, now)


class Decision(NamedTuple):
    """The waiters granted now (each with its instant, ``now``) and when the new head is due."""

    granted: list[tuple[Waiter, int]]
    next_due: int | None  # when the head left waiting may be granted (None: no head, or never fits)


def take_heads(view: RateView, used: int, queue: Sequence[Waiter], now: int) -> list[Waiter]:
    """The heads granted at ``now``, in order: each while ``used`` (the costs granted in the window
    ending ``now``) plus its own cost stays within the limit; none while a pause holds. A head that
    does not fit stops the queue: nobody behind it passes."""
    if view.paused_until is not None and view.paused_until > now:
        return []
    granted = []
    for waiter in queue:
        if used + waiter.cost > view.limit:
            break
        granted.append(waiter)
        used += waiter.cost
    return granted


def room_needed(view: RateView, used: int, cost: int) -> int:
    """How much must leave the window before ``cost`` fits beside ``used``: so many of the window's
    oldest grants, at the most (each costs at least 1), are all :func:`due` needs to read."""
    return max(0, used + cost - view.limit)


def due(view: RateView, used: int, oldest: Sequence[Grant], cost: int, now: int) -> int | None:
    """The earliest instant from ``now`` at which ``cost`` fits: ``used`` is the costs granted in
    the window ending ``now``, ``oldest`` that window's grants oldest first, at least
    :func:`room_needed` of them. ``None``: it never fits (``cost`` above the limit in effect)."""
    if cost > view.limit:
        return None
    at = now if view.paused_until is None else max(now, view.paused_until)
    for grant in oldest:
        if grant.at > at - view.per_ms and used + cost <= view.limit:
            break
        used -= grant.cost  # out of the window by ``at``, or the next to leave
        at = max(at, grant.at + view.per_ms)
    if used + cost > view.limit:
        raise ValueError(f"rate {view.name!r}: {len(oldest)} grants read are not enough to make room")
    return at


def grant_due(view: RateView, grants: Sequence[Grant], queue: Sequence[Waiter], now: int) -> Decision:
    """Grant the queue's heads, in order, while the window allows each one now; then say when the
    next head is due. ``queue`` is the (rate, key)'s waiters in ``pos`` order; ``grants`` its grants
    so far (only those of the last ``per_ms`` matter). The store makes the same decision from what
    it reads of the window: its use (:func:`window_use`) and its oldest grants."""
    used = window_use(grants, view.per_ms, now)
    granted = take_heads(view, used, queue, now)
    if len(granted) == len(queue):
        return Decision([(waiter, now) for waiter in granted], None)
    made = [*grants, *(Grant(now, waiter.cost) for waiter in granted)]
    head = queue[len(granted)]
    used += sum(waiter.cost for waiter in granted)
    return Decision(
        [(waiter, now) for waiter in granted],
        due(view, used, in_window(made, view.per_ms, now), head.cost, now),
    )


def window_use(grants: Iterable[Grant], per_ms: int, now: int) -> int:
    """The costs granted in the window ending at ``now`` (what operators see as used)."""
    return sum(g.cost for g in grants if now - per_ms < g.at <= now)
