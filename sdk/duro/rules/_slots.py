"""Slot decisions, pure: no I/O and no clock. The store applies each decision in one transaction.

A limit has ``capacity`` slots. A slot request (one ``acquire_slot``) is in one state:

- ``waiting``: in the limit's FIFO queue (``pos`` orders it), until ``timeout_at``;
- ``reserved``: handed to a waiting run, which must confirm before ``reserved_until`` (2 minutes);
- ``busy``: held, until released or until ``expires_at`` (``max_hold``, read once, at grant). A
  waiter idle in the very process that hands the slot out is made busy at once, its acquisition
  recorded in the same transaction (a reservation is for a waiter that may be gone);
- terminal: ``released`` (``reason``: release, operator, max_hold), ``timed_out``, ``cancelled`` (``reason``
  run_ended).

Invariant kept by every decision: ``busy + reserved <= capacity`` at the moment of a grant. Capacity
is read at every grant pass (raising it grants at once); lowering it takes nothing back.

A **keyed** limit (``per_key``) also caps each key: a request carries its ``key``, and a slot goes
to the oldest waiter whose key has room (its key's busy + reserved below the key's capacity) while
the limit has room. A key at its capacity never holds up the waiters of other keys; within a key
the queue is FIFO. A decision is given the keys' counts as stored (``KeyView``) and keeps them up to
date with its own changes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Literal, NamedTuple

from .._states import SlotState

RESERVATION_MS = 2 * 60_000
SWEEP_MS = 15_000
ACTIVE_STATES = ("waiting", "reserved", "busy")
TERMINAL_STATES = ("released", "timed_out", "cancelled")


class SlotRow(NamedTuple):
    """One slot request as stored (a named tuple: decisions copy rows with ``_replace``, cheaply)."""

    id: str
    limit: str
    run_id: str | None
    state: SlotState
    pos: int
    label: str | None = None
    enqueued_at: int = 0
    timeout_at: int | None = None
    reserved_until: int | None = None
    granted_at: int | None = None
    held_since: int | None = None
    max_hold_ms: int | None = None
    expires_at: int | None = None
    ended_at: int | None = None
    reason: str | None = None
    key: str | None = None  # a keyed limit's key (None on a plain limit)

    @property
    def due_at(self) -> int | None:
        """The next instant something happens to this slot on its own (an expiry or a timeout)."""
        if self.state == "busy":
            return self.expires_at
        if self.state == "reserved":
            return self.reserved_until
        if self.state == "waiting":
            return self.timeout_at
        return None


class LimitView(NamedTuple):
    """What a decision needs to know of a limit: effective capacity and max hold, and its counts."""

    name: str
    capacity: int
    max_hold_ms: int
    busy: int
    reserved: int
    waiting: int
    next_pos: int
    per_key: int | None = None  # a keyed limit's capacity per key

    @property
    def free(self) -> int:
        return max(0, self.capacity - self.busy - self.reserved)


class KeyView(NamedTuple):
    """One key of a keyed limit as a decision needs it: its capacity in effect and its counts."""

    capacity: int
    busy: int = 0
    reserved: int = 0
    waiting: int = 0

    @property
    def free(self) -> int:
        return max(0, self.capacity - self.busy - self.reserved)


class SlotEvent(NamedTuple):
    """What a decision did to one slot, as operators count it (metrics, logs): ``kind`` is

    - ``held``: the slot became its run's (``ms``: from the request to now, the wait);
    - ``released``: given back (``ms``: how long it was held);
    - ``expired``: taken back by ``max_hold`` (``ms``: how long it was held), a release that got lost;
    - ``timed_out``: the request's timeout passed in the queue;
    - ``lapsed``: a reservation its run did not confirm in time (requeued, or timed out as well).

    Never a label or a run id: the limit's name is the only name it carries."""

    kind: Literal["held", "released", "expired", "timed_out", "lapsed"]
    limit: str
    ms: int | None = None


def slot_json(row: SlotRow) -> str:
    """A granted slot as its hook step's result: what a replay reads back as the ``Slot``."""
    if row.key is None:
        return json.dumps({"id": row.id, "limit": row.limit, "label": row.label})
    return json.dumps({"id": row.id, "limit": row.limit, "label": row.label, "key": row.key})


def slot_events(before: SlotRow | None, after: SlotRow, lapsed: bool = False) -> list[SlotEvent]:
    """The events of one slot's change from ``before`` (``None``: a new request) to ``after``."""
    was = None if before is None else before.state
    events = []
    if lapsed and was == "reserved":
        events.append(SlotEvent("lapsed", after.limit))
    if after.state == "busy" and was != "busy":
        events.append(SlotEvent("held", after.limit, (after.held_since or 0) - after.enqueued_at))
    elif after.state == "released" and was == "busy":
        held = (after.ended_at or 0) - (after.held_since or after.ended_at or 0)
        events.append(SlotEvent("expired" if after.reason == "max_hold" else "released", after.limit, held))
    elif after.state == "timed_out" and was != "timed_out":
        events.append(SlotEvent("timed_out", after.limit))
    return events


@dataclass
class Decision:
    """Slot rows to write (new or changed) and the limit's counts afterwards, and what that did
    (``events``, for metrics and logs)."""

    view: LimitView
    # a keyed limit's keys as stored before this decision (``know_keys``): ``key_view`` adds the
    # decision's own changes
    keys: dict[str, KeyView] = field(default_factory=dict)
    granted: list[SlotRow] = field(default_factory=list)  # rows that became reserved or busy
    events: list[SlotEvent] = field(default_factory=list)
    # by key: the changes of this decision to its busy, reserved and waiting counts (on a keyed
    # limit, rows without a key, from before it was keyed, under ``None``)
    _key_deltas: dict[str | None, list[int]] = field(default_factory=dict)
    # by slot id, in the order last written: a row written twice is one write, its last (a dict, so
    # that K grants are O(K), not a list rebuilt at every grant)
    _writes: dict[str, SlotRow] = field(default_factory=dict)

    @property
    def writes(self) -> list[SlotRow]:
        """The rows to write, each once, in the order they were last changed."""
        return list(self._writes.values())

    def know_keys(self, stored: dict[str, KeyView]) -> None:
        """The keys' counts as stored (before this decision), for the keys it may grant to."""
        self.keys.update(stored)

    def key_changes(self) -> dict[str | None, tuple[int, int, int]]:
        """A keyed limit's keys this decision changed, each with the change to its busy, reserved
        and waiting counts (possibly all 0: a waiter requeued, its key's queue reordered). Rows
        without a key count under ``None``."""
        return {key: (d[0], d[1], d[2]) for key, d in self._key_deltas.items()}

    def key_view(self, key: str) -> KeyView | None:
        """``key`` as it stands with this decision's changes, or ``None`` if its counts are unknown."""
        stored = self.keys.get(key)
        if stored is None:
            return None
        delta = self._key_deltas.get(key)
        if delta is None:
            return stored
        return stored._replace(
            busy=stored.busy + delta[0],
            reserved=stored.reserved + delta[1],
            waiting=stored.waiting + delta[2],
        )

    def put(self, before: SlotRow | None, after: SlotRow, lapsed: bool = False) -> None:
        counts = {"busy": self.view.busy, "reserved": self.view.reserved, "waiting": self.view.waiting}
        if before is not None and before.state in counts:
            counts[before.state] -= 1
        if after.state in counts:
            counts[after.state] += 1
        if self.view.per_key is not None:
            delta = self._key_deltas.setdefault(after.key, [0, 0, 0])
            if before is not None and before.state in _COUNTED:
                delta[_COUNTED[before.state]] -= 1
            if after.state in _COUNTED:
                delta[_COUNTED[after.state]] += 1
        next_pos = max(self.view.next_pos, after.pos + 1)
        self.view = self.view._replace(
            next_pos=next_pos, busy=counts["busy"], reserved=counts["reserved"], waiting=counts["waiting"]
        )
        self._writes.pop(after.id, None)
        self._writes[after.id] = after
        if after.state in ("reserved", "busy") and (before is None or before.state == "waiting"):
            self.granted.append(after)
        self.events += slot_events(before, after, lapsed)


_COUNTED = {"busy": 0, "reserved": 1, "waiting": 2}  # a key's counts, as KeyView orders them


def _hold(row: SlotRow, view: LimitView, now: int) -> SlotRow:
    return row._replace(
        state="busy",
        granted_at=now if row.granted_at is None else row.granted_at,
        held_since=now,
        max_hold_ms=row.max_hold_ms or view.max_hold_ms,
        expires_at=now + (row.max_hold_ms or view.max_hold_ms),
        reserved_until=None,
    )


def request(
    view: LimitView,
    slot_id: str,
    run_id: str | None,
    label: str | None,
    timeout_at: int | None,
    now: int,
    queue_is_empty: bool,
    key: str | None = None,
    key_view: KeyView | None = None,
) -> Decision:
    """A run asks for a slot: busy at once if one is free and nobody waits ahead, else queued last.
    On a keyed limit (``key``, with its counts ``key_view``) "ahead" is its own key's queue, and
    the key must have room too: waiters of other keys wait because their keys are full."""
    decision = Decision(view)
    row = SlotRow(
        id=slot_id,
        limit=view.name,
        run_id=run_id,
        state="waiting",
        pos=view.next_pos,
        label=label,
        enqueued_at=now,
        timeout_at=timeout_at,
        key=key,
    )
    if key is not None:
        if key_view is not None:
            decision.know_keys({key: key_view})
        queue_is_empty = key_view is not None and key_view.waiting == 0 and key_view.free > 0
    if queue_is_empty and view.free > 0:
        decision.put(None, _hold(row._replace(max_hold_ms=view.max_hold_ms), view, now))
    else:
        decision.put(None, row)
    return decision


def next_grants(decision: Decision, heads: list[SlotRow], most: int | None = None) -> list[SlotRow]:
    """The head waiters (``heads``, in order) that the free capacity goes to (``most`` of them at
    the most: a large grant pass is applied in bounded transactions). On a keyed limit, a waiter
    whose key has no room (or whose key's counts the decision was not given) is passed over."""
    free = decision.view.free if most is None else min(most, decision.view.free)
    chosen: list[SlotRow] = []
    room: dict[str, int] = {}  # by key: the slots it may still take in this grant pass
    keyed = decision.view.per_key is not None  # a limit no longer keyed ignores its waiters' keys
    for row in heads:
        if len(chosen) >= free:
            break
        if row.state != "waiting":
            continue
        if keyed and row.key is not None:
            left = room.get(row.key)
            if left is None:
                view = decision.key_view(row.key)
                left = 0 if view is None else view.free
            room[row.key] = left - 1
            if left <= 0:
                continue
        chosen.append(row)
    return chosen


def grant_heads(
    decision: Decision,
    heads: list[SlotRow],
    now: int,
    taken: frozenset[str] = frozenset(),
    most: int | None = None,
) -> Decision:
    """Reserve the queue's head waiters (``heads``, in order) for as many slots as are free. A waiter
    in ``taken`` is known to be waiting right now in the deciding process, which records its
    acquisition in the same transaction: it is busy at once, with no reservation to confirm."""
    for row in next_grants(decision, heads, most):
        if row.id in taken:
            decision.put(row, _hold(row._replace(max_hold_ms=decision.view.max_hold_ms), decision.view, now))
        else:
            decision.put(
                row,
                row._replace(
                    state="reserved",
                    granted_at=now,
                    reserved_until=now + RESERVATION_MS,
                    max_hold_ms=decision.view.max_hold_ms,
                ),
            )
    return decision


def confirm(view: LimitView, row: SlotRow, now: int) -> Decision:
    """The run a slot was reserved for takes it: reserved becomes busy, its max hold runs from now.
    A lapsed reservation is expired instead (requeued last); anything else changes nothing."""
    decision = Decision(view)
    if row.state == "reserved" and row.reserved_until is not None and row.reserved_until > now:
        decision.put(row, _hold(row, view, now))
    elif row.state == "reserved":  # too late: the reservation lapsed, whatever ran the expiry pass first
        return expire(view, [row], now)
    return decision


def release(view: LimitView, row: SlotRow, now: int, reason: str = "release") -> Decision:
    """Give a held slot back; a second release, or of a waiting request, is a no-op.

    A reserved slot is freed as a lapsed reservation is (see ``expire``): its run has not taken it
    yet, so it goes back to the queue, last, keeping what is left of its timeout (or times out if
    nothing is left), and the freed slot goes to the next run. Its run never sees a timeout that
    did not happen."""
    decision = Decision(view)
    if row.state == "busy":
        decision.put(row, row._replace(state="released", ended_at=now, reason=reason, reserved_until=None))
    elif row.state == "reserved":
        decision.put(row, _requeue(row, decision.view, now))
    return decision


def leave(view: LimitView, row: SlotRow, now: int) -> Decision:
    """The run of a waiting or just-picked request ended: it leaves the queue (a busy slot stays)."""
    decision = Decision(view)
    if row.state in ("waiting", "reserved"):
        decision.put(
            row, row._replace(state="cancelled", ended_at=now, reason="run_ended", reserved_until=None)
        )
    return decision


def _requeue(row: SlotRow, view: LimitView, now: int) -> SlotRow:
    """A reservation its run did not confirm: back to the end of the queue with what is left of its
    timeout, or timed out if nothing is left."""
    if row.timeout_at is not None and row.timeout_at <= now:
        return row._replace(state="timed_out", ended_at=now, reserved_until=None)
    return row._replace(state="waiting", pos=view.next_pos, reserved_until=None, granted_at=None)


def expire(view: LimitView, due: list[SlotRow], now: int) -> Decision:
    """Apply what is due by ``now``: a busy slot past ``max_hold`` is released; a reservation not
    confirmed in time goes to the end of the queue (keeping what is left of its timeout, or timing
    out if nothing is left); a waiter past its timeout leaves the queue."""
    decision = Decision(view)
    for row in sorted(due, key=lambda r: (r.due_at or 0, r.pos)):
        if row.due_at is None or row.due_at > now:
            continue
        if row.state == "busy":
            decision.put(row, row._replace(state="released", ended_at=now, reason="max_hold"))
        elif row.state == "reserved":
            decision.put(row, _requeue(row, decision.view, now), lapsed=True)
        elif row.state == "waiting":
            decision.put(row, row._replace(state="timed_out", ended_at=now))
    return decision


def give_up(view: LimitView, row: SlotRow, now: int) -> Decision:
    """The waiter's own timeout passed: a waiting request times out. A reserved one is kept: the
    slot arrived in time and the run confirms it."""
    decision = Decision(view)
    if row.state == "waiting":
        decision.put(row, row._replace(state="timed_out", ended_at=now))
    return decision
