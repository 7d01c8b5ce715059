"""The pure slot decisions (``request``, ``confirm``, ``give_up``, ``release``, ``leave``, ``expire``,
``next_grants``, ``grant_heads``) tested on their own: no store, no I/O, no clock.

First one table per decision; then a hypothesis state machine that applies the decisions to an
in-memory limit exactly as ``store/_slots_sql.py`` does (read the limit's counts, decide, hand free
capacity to the queue's heads, write the rows and the counts) and checks the invariants after every
step: busy + reserved <= capacity at every grant, FIFO grants by ``pos``, the counts equal the rows,
no row granted while held, reservation and max-hold times, terminal rows frozen."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

# The one import of the module under test: if it moves (to ``duro.limits._decisions``), change this line.
from duro.rules import _slots as slots

RES = slots.RESERVATION_MS
HOLD = 45 * 60_000
NOW = 1_700_000_000_000
LIMIT = "voice-calls"


# -- helpers ---------------------------------------------------------------------------------------


def view(capacity=2, busy=0, reserved=0, waiting=0, next_pos=10, max_hold_ms=HOLD) -> slots.LimitView:
    return slots.LimitView(LIMIT, capacity, max_hold_ms, busy, reserved, waiting, next_pos)


def waiting(slot_id="w", pos=1, timeout_at=None, enqueued_at=NOW - 1_000) -> slots.SlotRow:
    return slots.SlotRow(
        slot_id, LIMIT, f"run-{slot_id}", "waiting", pos, f"label-{slot_id}", enqueued_at, timeout_at
    )


def reserved(slot_id="r", pos=1, granted_at=NOW - 1_000, timeout_at=None, max_hold_ms=HOLD) -> slots.SlotRow:
    return waiting(slot_id, pos, timeout_at)._replace(
        state="reserved", granted_at=granted_at, reserved_until=granted_at + RES, max_hold_ms=max_hold_ms
    )


def busy(slot_id="b", pos=1, held_since=NOW - 1_000, max_hold_ms=HOLD) -> slots.SlotRow:
    return waiting(slot_id, pos)._replace(
        state="busy",
        granted_at=held_since,
        held_since=held_since,
        max_hold_ms=max_hold_ms,
        expires_at=held_since + max_hold_ms,
    )


def counts(v: slots.LimitView) -> tuple[int, int, int, int]:
    return (v.busy, v.reserved, v.waiting, v.next_pos)


def hold_times(row: slots.SlotRow) -> tuple[int | None, ...]:
    return (row.granted_at, row.held_since, row.max_hold_ms, row.expires_at)


def ids(rows) -> list[str]:
    return [row.id for row in rows]


# -- request ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("capacity", "held_busy", "held_reserved", "queued", "granted"),
    [
        (2, 0, 0, 0, True),  # free, nobody waits: busy at once
        (2, 1, 0, 0, True),
        (2, 1, 1, 0, False),  # full
        (2, 0, 2, 0, False),  # full of reservations
        (2, 1, 0, 3, False),  # a slot is free but others wait ahead (the sweep hands it to them)
        (1, 3, 0, 0, False),  # capacity lowered below what is held
    ],
)
def test_request_table(capacity, held_busy, held_reserved, queued, granted):
    before = view(capacity, held_busy, held_reserved, queued, next_pos=7)
    decision = slots.request(before, "s", "run-1", "call-1", NOW + 60_000, NOW, queue_is_empty=queued == 0)
    (row,) = decision.writes
    assert (row.id, row.limit, row.run_id, row.label) == ("s", LIMIT, "run-1", "call-1")
    assert (row.pos, row.enqueued_at, row.timeout_at) == (7, NOW, NOW + 60_000)
    assert decision.view.next_pos == 8
    assert (decision.view.capacity, decision.view.max_hold_ms) == (capacity, HOLD)
    if granted:
        assert row.state == "busy"
        assert hold_times(row) == (NOW, NOW, HOLD, NOW + HOLD)
        assert row.reserved_until is None and row.due_at == NOW + HOLD
        assert counts(decision.view) == (held_busy + 1, held_reserved, queued, 8)
        assert decision.granted == [row]
    else:
        assert row.state == "waiting"
        assert hold_times(row) == (None,) * 4
        assert row.due_at == NOW + 60_000
        assert counts(decision.view) == (held_busy, held_reserved, queued + 1, 8)
        assert decision.granted == []


def test_request_without_timeout_is_never_due():
    decision = slots.request(view(1, busy=1), "s", "run", None, None, NOW, queue_is_empty=True)
    assert decision.writes[0].state == "waiting" and decision.writes[0].due_at is None


# -- confirm ---------------------------------------------------------------------------------------


def test_confirm_in_time_holds_with_the_max_hold_read_at_grant():
    row = reserved("r", pos=3, granted_at=NOW - 1_000, max_hold_ms=60_000)
    before = view(capacity=2, busy=1, reserved=1, max_hold_ms=HOLD)  # max hold changed since the grant
    decision = slots.confirm(before, row, NOW)
    (after,) = decision.writes
    assert after == row._replace(
        state="busy", held_since=NOW, expires_at=NOW + 60_000, reserved_until=None, granted_at=NOW - 1_000
    )
    assert counts(decision.view) == (2, 0, 0, 10)
    assert decision.granted == []  # reserved -> busy is not a new grant


def test_confirm_keeps_a_grant_made_at_instant_zero():
    """A clock may start at 0 (``SimulatedClock(0)``): a reservation granted then keeps ``granted_at=0``."""
    row = reserved("r", granted_at=0)
    (after,) = slots.confirm(view(reserved=1), row, 5).writes
    assert (after.state, after.granted_at, after.held_since) == ("busy", 0, 5)


@pytest.mark.parametrize(
    ("now", "timeout_at", "state"),
    [
        (NOW - 1_000 + RES, None, "waiting"),  # exactly at reserved_until: lapsed
        (NOW + RES, None, "waiting"),
        (NOW + RES, NOW + RES + 1, "waiting"),  # 1 ms of its timeout left: back in the queue
        (NOW + RES, NOW + RES, "timed_out"),  # nothing left of its timeout
        (NOW + RES, NOW, "timed_out"),
    ],
)
def test_confirm_after_the_reservation_lapsed(now, timeout_at, state):
    row = reserved("r", pos=3, granted_at=NOW - 1_000, timeout_at=timeout_at)
    before = view(capacity=2, busy=1, reserved=1, waiting=2, next_pos=10)
    decision = slots.confirm(before, row, now)
    (after,) = decision.writes
    assert after.state == state and after.reserved_until is None
    assert after.timeout_at == timeout_at  # what is left of it, as an instant: unchanged
    if state == "waiting":
        assert (after.pos, after.granted_at, after.ended_at) == (10, None, None)  # last in the queue
        assert counts(decision.view) == (1, 0, 3, 11)
    else:
        assert (after.pos, after.ended_at) == (3, now)
        assert counts(decision.view) == (1, 0, 2, 10)
    assert decision.granted == []


@pytest.mark.parametrize(
    "row",
    [waiting(), busy(), busy()._replace(state="released", ended_at=NOW, reason="release")],
    ids=["waiting", "busy", "released"],
)
def test_confirm_of_anything_but_a_reservation_changes_nothing(row):
    before = view(busy=1, waiting=1)
    decision = slots.confirm(before, row, NOW)
    assert (decision.writes, decision.granted, decision.view) == ([], [], before)


# -- give_up ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "writes"),
    [
        (waiting(timeout_at=NOW), True),
        (reserved(timeout_at=NOW), False),  # the slot arrived in time: the run confirms it
        (busy(), False),
        (waiting()._replace(state="timed_out", ended_at=NOW - 5), False),
        (waiting()._replace(state="cancelled", ended_at=NOW - 5, reason="run_ended"), False),
    ],
    ids=["waiting", "reserved", "busy", "timed_out", "cancelled"],
)
def test_give_up_table(row, writes):
    before = view(busy=1, reserved=1, waiting=1)
    decision = slots.give_up(before, row, NOW)
    if writes:
        assert decision.writes == [row._replace(state="timed_out", ended_at=NOW)]
        assert counts(decision.view) == (1, 1, 0, 10)
    else:
        assert (decision.writes, decision.view) == ([], before)
    assert decision.granted == []


# -- release ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["release", "operator"])
def test_release_of_a_busy_slot(reason):
    row = busy("b", pos=2)
    decision = slots.release(view(busy=2, waiting=1), row, NOW, reason)
    assert decision.writes == [row._replace(state="released", ended_at=NOW, reason=reason)]
    assert counts(decision.view) == (1, 0, 1, 10)
    assert decision.view.free == 1 and decision.granted == []  # handing it out is grant_heads's job


@pytest.mark.parametrize(
    ("timeout_at", "state"), [(None, "waiting"), (NOW + 1, "waiting"), (NOW, "timed_out")]
)
def test_release_of_a_reserved_slot_requeues_it(timeout_at, state):
    row = reserved("r", pos=2, timeout_at=timeout_at)
    decision = slots.release(view(busy=1, reserved=1, waiting=1), row, NOW, "operator")
    (after,) = decision.writes
    assert after.state == state and after.reserved_until is None and after.reason is None
    if state == "waiting":  # as a lapsed reservation: last, with what is left of its timeout
        assert (after.pos, after.granted_at, after.timeout_at) == (10, None, timeout_at)
        assert counts(decision.view) == (1, 0, 2, 11)
    else:  # never a false timeout: only when its own timeout has passed
        assert after.ended_at == NOW
        assert counts(decision.view) == (1, 0, 1, 10)


@pytest.mark.parametrize(
    "row",
    [
        busy()._replace(state="released", ended_at=NOW - 5, reason="release"),
        busy()._replace(state="released", ended_at=NOW - 5, reason="max_hold"),
        waiting(),
        waiting()._replace(state="timed_out", ended_at=NOW - 5),
        waiting()._replace(state="cancelled", ended_at=NOW - 5, reason="run_ended"),
    ],
    ids=["released", "max_hold", "waiting", "timed_out", "cancelled"],
)
def test_release_of_anything_else_writes_nothing(row):
    before = view(busy=1, waiting=1)
    decision = slots.release(before, row, NOW, "operator")
    assert (decision.writes, decision.granted, decision.view) == ([], [], before)


# -- leave -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "after_counts"),
    [
        (waiting("w", timeout_at=NOW + 5), (1, 1, 0, 10)),
        (reserved("r"), (1, 0, 1, 10)),  # a just-picked run ending frees its slot
    ],
    ids=["waiting", "reserved"],
)
def test_leave_of_a_waiting_or_reserved_run(row, after_counts):
    decision = slots.leave(view(busy=1, reserved=1, waiting=1), row, NOW)
    left = row._replace(state="cancelled", ended_at=NOW, reason="run_ended", reserved_until=None)
    assert decision.writes == [left]
    assert counts(decision.view) == after_counts
    assert decision.writes[0].due_at is None


@pytest.mark.parametrize(
    "row",
    [busy(), busy()._replace(state="released", ended_at=NOW - 5, reason="release")],
    ids=["busy", "released"],
)
def test_leave_keeps_a_busy_slot(row):
    before = view(busy=1)
    decision = slots.leave(before, row, NOW)
    assert (decision.writes, decision.view) == ([], before)


# -- expire ----------------------------------------------------------------------------------------


def test_expire_max_hold():
    due, early = busy("b1", held_since=NOW - HOLD), busy("b2", held_since=NOW - HOLD + 1)
    decision = slots.expire(view(busy=2), [due, early], NOW)
    assert decision.writes == [due._replace(state="released", ended_at=NOW, reason="max_hold")]
    assert counts(decision.view) == (1, 0, 0, 10)


def test_expire_reservation_lapse():
    lapsed = reserved("r1", pos=1, granted_at=NOW - RES, timeout_at=NOW + 60_000)
    too_late = reserved("r2", pos=2, granted_at=NOW - RES, timeout_at=NOW)
    in_time = reserved("r3", pos=3, granted_at=NOW - RES + 1)
    decision = slots.expire(view(reserved=3), [in_time, too_late, lapsed], NOW)
    assert decision.writes == [
        lapsed._replace(state="waiting", pos=10, reserved_until=None, granted_at=None),
        too_late._replace(state="timed_out", ended_at=NOW, reserved_until=None),
    ]
    assert counts(decision.view) == (0, 1, 1, 11)


def test_expire_waiter_timeout():
    late, on_time, forever = waiting("w1", 1, NOW), waiting("w2", 2, NOW + 1), waiting("w3", 3, None)
    decision = slots.expire(view(busy=2, waiting=3), [late, on_time, forever], NOW)
    assert decision.writes == [late._replace(state="timed_out", ended_at=NOW)]
    assert counts(decision.view) == (2, 0, 2, 10)


def test_expire_together_in_due_order_requeues_get_successive_positions():
    rows = [
        busy("b", pos=1, held_since=NOW - HOLD - 7),  # due NOW - 7
        reserved("r2", pos=5, granted_at=NOW - RES - 3),  # due NOW - 3
        reserved("r1", pos=4, granted_at=NOW - RES - 3),  # due NOW - 3, ahead by pos
        waiting("w", pos=6, timeout_at=NOW - 1),
        reserved("r0", pos=3, granted_at=NOW - RES - 9),  # due NOW - 9: first
        busy("b-late", pos=2, held_since=NOW),  # not due
        busy()._replace(id="old", state="released", ended_at=NOW - 99, reason="release"),  # terminal
    ]
    decision = slots.expire(view(capacity=5, busy=2, reserved=3, waiting=1, next_pos=20), rows, NOW)
    assert [(row.id, row.state, row.pos) for row in decision.writes] == [
        ("r0", "waiting", 20),
        ("b", "released", 1),
        ("r1", "waiting", 21),
        ("r2", "waiting", 22),
        ("w", "timed_out", 6),
    ]
    assert counts(decision.view) == (1, 0, 3, 23)
    assert decision.granted == []


def test_expire_of_nothing_due_changes_nothing():
    before = view(busy=1, waiting=1)
    decision = slots.expire(before, [busy(held_since=NOW), waiting(timeout_at=NOW + 1)], NOW)
    assert (decision.writes, decision.view) == ([], before)


# -- next_grants and grant_heads ----------------------------------------------------------------------


def queue(*positions: int) -> list[slots.SlotRow]:
    return [waiting(f"w{pos}", pos) for pos in positions]


@pytest.mark.parametrize(
    ("capacity", "held_busy", "held_reserved", "expected"),
    [
        (4, 1, 0, ["w1", "w2", "w3"]),  # capacity raised: the heads get the new slots at once
        (2, 1, 0, ["w1"]),
        (5, 0, 0, ["w1", "w2", "w3"]),  # more slots than waiters
        (2, 1, 1, []),
        (1, 3, 2, []),  # capacity lowered: nothing taken back, nothing handed out
    ],
)
def test_grant_heads_reserves_the_heads(capacity, held_busy, held_reserved, expected):
    heads = queue(1, 2, 3)
    decision = slots.Decision(view(capacity, held_busy, held_reserved, waiting=3, max_hold_ms=90_000))
    assert ids(slots.next_grants(decision, heads)) == expected
    slots.grant_heads(decision, heads, NOW)
    assert ids(decision.granted) == expected == ids(decision.writes)
    for row in decision.writes:
        assert row.state == "reserved"
        assert (row.granted_at, row.reserved_until, row.max_hold_ms) == (NOW, NOW + RES, 90_000)
        assert (row.held_since, row.expires_at) == (None, None)
    n = len(expected)
    assert counts(decision.view) == (held_busy, held_reserved + n, 3 - n, 10)
    assert decision.view.busy + decision.view.reserved <= max(capacity, held_busy + held_reserved)


def test_grant_heads_taken_is_busy_at_once():
    heads = queue(1, 2, 3)
    decision = slots.Decision(view(capacity=3, busy=1, waiting=3, max_hold_ms=90_000))
    slots.grant_heads(decision, heads, NOW, taken=frozenset({"w2", "w3"}))  # w3 is not a head: it waits
    w1, w2 = decision.writes
    assert (w1.id, w1.state, w1.reserved_until) == ("w1", "reserved", NOW + RES)
    assert (w2.id, w2.state, w2.reserved_until) == ("w2", "busy", None)
    assert hold_times(w2) == (NOW, NOW, 90_000, NOW + 90_000)
    assert decision.granted == [w1, w2]
    assert counts(decision.view) == (2, 1, 1, 10)


def test_next_grants_skips_heads_that_are_not_waiting():
    heads = [waiting("a", 1), reserved("b", 2), waiting("c", 3), waiting("d", 4)]
    assert ids(slots.next_grants(slots.Decision(view(capacity=2, waiting=3)), heads)) == ["a", "c"]


def test_a_lapsed_reservation_handed_straight_back_is_written_once():
    row = reserved("r", pos=3, granted_at=NOW - RES)
    decision = slots.confirm(view(capacity=1, reserved=1), row, NOW)
    requeued = decision.writes[0]
    slots.grant_heads(decision, [requeued], NOW)
    (after,) = decision.writes
    assert (after.state, after.pos) == ("reserved", 10)
    assert (after.granted_at, after.reserved_until) == (NOW, NOW + RES)
    assert decision.granted == [after]
    assert counts(decision.view) == (0, 1, 0, 11)


def test_grant_heads_moves_a_rewritten_row_to_the_end_of_writes():
    """``Decision.put`` keeps one write per row, the latest, at the end: a position in ``writes`` is not
    the order rows were first touched. (``SqlStore._release`` reads ``decision.writes[0]`` as the
    released row: with spare capacity and the released reservation handed straight back, it is not.)"""
    row = reserved("r", pos=3, granted_at=NOW - 1_000)
    decision = slots.release(view(capacity=3, busy=1, reserved=1, waiting=1), row, NOW, "operator")
    slots.grant_heads(decision, [waiting("w", 5), decision.writes[0]], NOW)
    assert [(w.id, w.state) for w in decision.writes] == [("w", "reserved"), ("r", "reserved")]


# -- the state machine -----------------------------------------------------------------------------

ALLOWED = {
    None: {"waiting", "busy"},
    "waiting": {"reserved", "busy", "timed_out", "cancelled"},
    "reserved": {"busy", "waiting", "timed_out", "cancelled", "reserved"},  # lapsed, requeued, granted again
    "busy": {"released"},
}
RUNS = ["run-a", "run-b", "run-c", "run-d"]
STEPS = [1, 1_000, slots.SWEEP_MS, RES - 1, RES, RES + 1, 10 * 60_000]
TIMEOUTS = [None, 0, 1, 30_000, RES, 3 * RES, 60 * 60_000]
MAX_HOLDS = [1_000, RES, 10 * 60_000]


class SlotMachine(RuleBasedStateMachine):
    """One limit in memory, kept as ``SqlStore`` keeps it: the limit's row (capacity and max hold, the
    counts and ``next_pos``) and the slot rows by id. Each rule is one store operation; ``_commit``
    checks the decision against the rows it read and writes it."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, slots.SlotRow] = {}
        self.stored = {"busy": 0, "reserved": 0, "waiting": 0, "next_pos": 0}
        self.ids = itertools.count()
        self.last_grant_pos = -1
        self.grant_max_hold: dict[str, int] = {}  # the max hold a row was granted with
        self.frozen: dict[str, slots.SlotRow] = {}  # terminal rows, as first written
        self.first: dict[str, slots.SlotRow] = {}  # rows as requested
        self.swept = False

    @initialize(
        start=st.sampled_from([0, NOW]), capacity=st.integers(1, 3), max_hold=st.sampled_from(MAX_HOLDS)
    )
    def setup(self, start, capacity, max_hold):
        self.now, self.capacity, self.max_hold_ms = start, capacity, max_hold

    # -- the store's plumbing, in memory ---------------------------------------------------------

    def view(self) -> slots.LimitView:
        return slots.LimitView(LIMIT, self.capacity, self.max_hold_ms, **self.stored)

    def grant_heads(
        self, decision: slots.Decision, waiting_here: frozenset[str] = frozenset()
    ) -> slots.Decision:
        """``Slots.grant_heads``: the first ``free + len(changed)`` stored waiters, overlaid
        with the rows this decision changed, in ``pos`` order; the idle waiters among the ones
        granted take their slot at once."""
        v = decision.view
        if v.free > 0 and v.waiting > 0:
            changed = {row.id: row for row in decision.writes}
            stored = sorted((r for r in self.rows.values() if r.state == "waiting"), key=lambda r: r.pos)
            heads_by_id = {r.id: changed.get(r.id, r) for r in stored[: v.free + len(changed)]}
            heads_by_id.update({r.id: r for r in changed.values() if r.state == "waiting"})
            heads = sorted((r for r in heads_by_id.values() if r.state == "waiting"), key=lambda r: r.pos)
            taken = frozenset(r.id for r in slots.next_grants(decision, heads) if r.id in waiting_here)
            slots.grant_heads(decision, heads, self.now, taken)
        return decision

    def _commit(self, decision: slots.Decision) -> None:
        before = dict(self.rows)
        v = decision.view
        assert (v.name, v.capacity, v.max_hold_ms) == (LIMIT, self.capacity, self.max_hold_ms)
        assert len(ids(decision.writes)) == len(set(ids(decision.writes)))
        granted_ids = ids(decision.granted)
        assert len(granted_ids) == len(set(granted_ids)), "a row granted twice in one decision"
        for row in decision.writes:
            old = before.get(row.id)
            assert row.state in ALLOWED[None if old is None else old.state], (old, row)
            assert row.limit == LIMIT
            if old is not None:
                assert (row.run_id, row.label, row.enqueued_at, row.timeout_at) == (
                    old.run_id,
                    old.label,
                    old.enqueued_at,
                    old.timeout_at,
                )
        if decision.granted:
            assert v.busy + v.reserved <= v.capacity, "over capacity at a grant"
        writes = {row.id: row for row in decision.writes}
        for row in decision.granted:
            old = before.get(row.id)
            if old is not None and old.state == "reserved":  # lapsed or released, requeued, granted again
                assert row.pos > old.pos, "granted while held"
            else:
                assert old is None or old.state == "waiting", "granted while held"
            assert writes[row.id] == row
            assert row.pos > self.last_grant_pos, "grants out of FIFO order"
            self.last_grant_pos = row.pos
            assert row.granted_at == self.now and row.max_hold_ms == self.max_hold_ms
            self.grant_max_hold[row.id] = row.max_hold_ms
        after = {**before, **writes}
        still_waiting = [r.pos for r in after.values() if r.state == "waiting"]
        assert all(pos > self.last_grant_pos for pos in still_waiting), "a waiter skipped"
        for row in decision.writes:
            old = before.get(row.id)
            if row.state == "busy" and (old is None or old.state != "busy"):
                assert (row.held_since, row.expires_at) == (self.now, self.now + row.max_hold_ms)
                if old is not None and old.state == "reserved":  # confirmed: granted at reservation
                    assert row.granted_at == old.granted_at
            if row.state in slots.TERMINAL_STATES:
                assert row.ended_at == self.now and row.due_at is None
                self.frozen[row.id] = row
            if row.state == "waiting" and old is not None and old.state == "reserved":
                assert row.pos >= self.stored["next_pos"], "a requeued row not at the end"
        self.rows = after
        self.stored = {"busy": v.busy, "reserved": v.reserved, "waiting": v.waiting, "next_pos": v.next_pos}

    def _pick(self, index: int, *states: str) -> slots.SlotRow | None:
        rows = sorted((r for r in self.rows.values() if not states or r.state in states), key=lambda r: r.id)
        return rows[index % len(rows)] if rows else None

    def _unchanged(self, decision: slots.Decision) -> None:
        assert (decision.writes, decision.granted, decision.view) == ([], [], self.view())

    # -- operations ------------------------------------------------------------------------------

    @rule(run_id=st.sampled_from(RUNS), timeout=st.sampled_from(TIMEOUTS))
    def request(self, run_id, timeout):
        """``_request``: no grant pass (a request frees nothing)."""
        slot_id = f"s{next(self.ids)}"
        timeout_at = None if timeout is None else self.now + timeout
        v = self.view()
        label = f"{run_id}/{slot_id}"
        decision = slots.request(v, slot_id, run_id, label, timeout_at, self.now, v.waiting == 0)
        self._commit(decision)
        self.first[slot_id] = self.rows[slot_id]
        self.swept = False

    @rule(index=st.integers(0, 50))
    def confirm(self, index):
        """``_confirm``: only a reservation is decided on; then the free capacity is handed out."""
        row = self._pick(index)
        if row is None:
            return
        decision = slots.confirm(self.view(), row, self.now)
        if row.state != "reserved":
            self._unchanged(decision)
            return
        self._commit(self.grant_heads(decision))
        self.swept = False

    @rule(index=st.integers(0, 50))
    def give_up(self, index):
        """``_give_up``: a waiter's own timer fired (its timeout passed); no grant pass."""
        row = self._pick(index)
        if row is None:
            return
        decision = slots.give_up(self.view(), row, self.now)
        if row.state != "waiting" or row.timeout_at is None or row.timeout_at > self.now:
            if row.state != "waiting":
                self._unchanged(decision)
            return  # a waiter whose timeout has not passed does not give up
        assert decision.writes[-1].state == "timed_out"
        self._commit(decision)

    @rule(index=st.integers(0, 50), reason=st.sampled_from(["release", "operator"]), mask=st.integers(0, 255))
    def release(self, index, reason, mask):
        """``_release``: then the freed slot goes to the heads; ``mask`` picks the waiters idle in the
        releasing process (the local grant: busy at once)."""
        row = self._pick(index)
        if row is None:
            return
        decision = slots.release(self.view(), row, self.now, reason)
        if row.state not in ("busy", "reserved"):
            self._unchanged(decision)
        queue = sorted((r for r in self.rows.values() if r.state == "waiting"), key=lambda r: r.pos)
        waiting_here = frozenset(r.id for i, r in enumerate(queue) if mask >> (i % 8) & 1)
        self._commit(self.grant_heads(decision, waiting_here))
        self.swept = False

    @rule(run_id=st.sampled_from(RUNS))
    def leave(self, run_id):
        """``slots_leave``: each waiting or reserved request of the run, in ``pos`` order."""
        for row in sorted(
            (r for r in self.rows.values() if r.run_id == run_id and r.state in ("waiting", "reserved")),
            key=lambda r: r.pos,
        ):
            row = self.rows[row.id]  # again: an earlier grant pass may have changed it
            decision = slots.leave(self.view(), row, self.now)
            if row.state not in ("waiting", "reserved"):
                self._unchanged(decision)
            self._commit(self.grant_heads(decision))
        for row in self.rows.values():
            if row.run_id == run_id and row.state == "busy":
                self._unchanged(slots.leave(self.view(), row, self.now))  # a busy slot stays held
        self.swept = False

    @rule(ms=st.sampled_from(STEPS))
    def advance(self, ms):
        self.now += ms
        self.swept = False

    @rule()
    def sweep(self):
        """``slots_expire``: everything due by now, then the free capacity to the queue's heads."""
        v = self.view()
        due = [r for r in self.rows.values() if r.due_at is not None and r.due_at <= self.now]
        if due or (v.free > 0 and v.waiting > 0):
            decision = slots.expire(v, sorted(due, key=lambda r: r.due_at), self.now)
            assert {r.id for r in decision.writes} == {r.id for r in due}
            self._commit(self.grant_heads(decision))
        self.swept = True

    @rule(capacity=st.integers(1, 4))
    def set_capacity(self, capacity):
        """``set_limit_override``: a raise hands slots out at once; a cut takes nothing back."""
        held = {r.id: r for r in self.rows.values() if r.state in ("busy", "reserved")}
        self.capacity = capacity
        self._commit(self.grant_heads(slots.Decision(self.view())))
        assert all(self.rows[i] == r for i, r in held.items()), "a slot taken back"

    @rule(max_hold=st.sampled_from(MAX_HOLDS))
    def set_max_hold(self, max_hold):
        self.max_hold_ms = max_hold
        self._commit(self.grant_heads(slots.Decision(self.view())))

    # -- invariants ------------------------------------------------------------------------------

    @invariant()
    def counts_equal_rows(self):
        for state in ("busy", "reserved", "waiting"):
            assert self.stored[state] == sum(r.state == state for r in self.rows.values()), state
        assert all(r.pos < self.stored["next_pos"] for r in self.rows.values())
        active = [r.pos for r in self.rows.values() if r.state in ("waiting", "reserved", "busy")]
        assert len(active) == len(set(active)), "two active rows at one position"

    @invariant()
    def no_free_slot_while_runs_wait(self):
        v = self.view()
        assert v.free == 0 or v.waiting == 0

    @invariant()
    def times_of_held_rows(self):
        for row in self.rows.values():
            if row.state == "reserved":
                assert row.reserved_until == row.granted_at + RES
                assert (row.held_since, row.expires_at) == (None, None)
                assert row.max_hold_ms == self.grant_max_hold[row.id]
            elif row.state == "busy":
                assert row.reserved_until is None
                assert row.expires_at == row.held_since + row.max_hold_ms
                assert row.max_hold_ms == self.grant_max_hold[row.id]
                assert row.granted_at is not None and row.granted_at <= row.held_since
            elif row.state == "waiting":
                assert (row.reserved_until, row.granted_at, row.ended_at) == (None, None, None)

    @invariant()
    def terminal_rows_never_change(self):
        for slot_id, row in self.frozen.items():
            assert self.rows[slot_id] == row

    @invariant()
    def requested_fields_kept(self):
        for slot_id, first in self.first.items():
            row = self.rows[slot_id]
            assert (row.run_id, row.label, row.enqueued_at, row.timeout_at) == (
                first.run_id,
                first.label,
                first.enqueued_at,
                first.timeout_at,
            )

    @invariant()
    def nothing_overdue_after_a_sweep(self):
        if self.swept:
            assert not [r for r in self.rows.values() if r.due_at is not None and r.due_at <= self.now]


SlotMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
test_slot_state_machine = SlotMachine.TestCase


# -- keyed limits: the oldest waiter whose key has room, while the limit has room --------------------


def keyed_queue(*keys: str) -> list[slots.SlotRow]:
    return [waiting(f"w{n}", pos=n)._replace(key=key) for n, key in enumerate(keys, start=1)]


@pytest.mark.parametrize(
    ("capacity", "busy_by_key", "queue_keys", "expected"),
    [
        (3, {"a": 2}, ("a", "b", "c"), ["w2"]),  # a is full: b, the oldest with room, takes the one free slot
        (4, {"a": 2}, ("a", "a", "b", "c"), ["w3", "w4"]),  # a key at capacity holds up nobody
        (4, {}, ("a", "a", "a", "b"), ["w1", "w2", "w4"]),  # FIFO within a key, up to its capacity
        (2, {"a": 2}, ("b", "a", "c"), []),  # the limit is full: nobody
        (5, {"a": 1, "b": 2}, ("b", "a", "b", "a", "c"), ["w2", "w5"]),
    ],
)
def test_keyed_grant_heads_table(capacity, busy_by_key, queue_keys, expected):
    held = sum(busy_by_key.values())
    decision = slots.Decision(view(capacity=capacity, busy=held, waiting=len(queue_keys))._replace(per_key=2))
    keys = {
        key: slots.KeyView(2, busy=busy_by_key.get(key, 0), waiting=queue_keys.count(key))
        for key in set(queue_keys)
    }
    decision.know_keys(keys)
    heads = keyed_queue(*queue_keys)
    slots.grant_heads(decision, heads, NOW)
    assert ids(decision.granted) == expected
    for key in keys:  # the decision keeps each key's counts with its own changes
        granted = sum(1 for row in decision.granted if row.key == key)
        assert decision.key_view(key) == keys[key]._replace(
            reserved=granted, waiting=keys[key].waiting - granted
        )


def test_a_keyed_request_is_granted_at_once_only_if_its_key_has_room_and_nobody_of_it_waits():
    free_key = slots.KeyView(2, busy=1)
    assert slots.request(
        view(capacity=3, busy=1, waiting=4), "s", "r", None, None, NOW, False, "a", free_key
    ).granted
    full_key = slots.KeyView(2, busy=2)
    assert not slots.request(view(capacity=5, busy=2), "s", "r", None, None, NOW, True, "a", full_key).granted
    queued = slots.KeyView(2, busy=1, waiting=1)
    assert not slots.request(
        view(capacity=5, busy=1, waiting=1), "s", "r", None, None, NOW, False, "a", queued
    ).granted
    row = slots.request(view(capacity=3), "s", "r", "lbl", None, NOW, True, "a", slots.KeyView(1)).writes[-1]
    assert (row.state, row.key) == ("busy", "a")
    assert json.loads(slots.slot_json(row)) == {"id": "s", "limit": LIMIT, "label": "lbl", "key": "a"}


def test_a_limit_no_longer_keyed_hands_out_in_queue_order_whatever_its_waiters_keys():
    """per_key removed from the config: the waiters that asked with a key are plain waiters now."""
    decision = slots.Decision(view(capacity=2, waiting=3))
    slots.grant_heads(decision, keyed_queue("a", "a", "b"), NOW)
    assert ids(decision.granted) == ["w1", "w2"]
    assert decision.key_changes() == {}  # a plain limit keeps no keys' counts


def test_a_keyed_limit_counts_its_keyless_waiters_under_none_and_grants_them_without_a_key_cap():
    """Waiters from before the limit was keyed: no key's capacity holds them up."""
    decision = slots.Decision(view(capacity=3, waiting=3)._replace(per_key=1))
    slots.grant_heads(decision, keyed_queue(None, None, None), NOW)
    assert ids(decision.granted) == ["w1", "w2", "w3"]
    assert decision.key_changes() == {None: (0, 3, -3)}


class KeyedSlotMachine(RuleBasedStateMachine):
    """A keyed limit in memory, as the store keeps it (slot rows; each decision given the stored
    counts of the keys it touches), checked after every decision against the rule's reference:
    no key over its capacity and the limit never over its own at a grant; after a grant pass either
    the limit is full or no waiter's key has room; grants of one key in queue order; every other
    waiter of a key a grant passed over still waits (a full key held up nobody)."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, slots.SlotRow] = {}
        self.next_pos = 0
        self.ids = itertools.count()
        self.last_grant_pos: dict[str, int] = {}
        self.now = NOW

    @initialize(capacity=st.integers(1, 4), per_key=st.integers(1, 3), keys=st.integers(1, 3))
    def setup(self, capacity, per_key, keys):
        self.capacity, self.per_key = capacity, min(per_key, capacity)
        self.keys = [f"k{n}" for n in range(keys)]
        self.key_capacity = {key: self.per_key for key in self.keys}

    def view(self) -> slots.LimitView:
        count = {
            state: sum(1 for r in self.rows.values() if r.state == state) for state in slots.ACTIVE_STATES
        }
        return slots.LimitView(
            LIMIT,
            self.capacity,
            HOLD,
            count["busy"],
            count["reserved"],
            count["waiting"],
            self.next_pos,
            self.per_key,
        )

    def key_views(self) -> dict[str, slots.KeyView]:
        def n(key, state):
            return sum(1 for r in self.rows.values() if r.key == key and r.state == state)

        return {
            key: slots.KeyView(self.key_capacity[key], n(key, "busy"), n(key, "reserved"), n(key, "waiting"))
            for key in self.keys
        }

    def grant_heads(self, decision: slots.Decision) -> slots.Decision:
        decision.know_keys(self.key_views())
        changed = {row.id: row for row in decision.writes}
        rows = {rid: changed.get(rid, row) for rid, row in self.rows.items()}
        rows.update(changed)
        heads = sorted((r for r in rows.values() if r.state == "waiting"), key=lambda r: r.pos)
        slots.grant_heads(decision, heads, self.now)
        return decision

    def commit(self, decision: slots.Decision, handed_out: bool) -> None:
        before = dict(self.rows)
        after = {**before, **{row.id: row for row in decision.writes}}
        held = {
            key: sum(1 for r in after.values() if r.key == key and r.state in ("busy", "reserved"))
            for key in self.keys
        }
        if decision.granted:
            assert sum(held.values()) <= self.capacity, "the limit over its capacity at a grant"
            for row in decision.granted:
                assert held[row.key] <= self.key_capacity[row.key], f"key {row.key} over its capacity"
                assert row.pos > self.last_grant_pos.get(row.key, -1), f"key {row.key}'s grants out of order"
                self.last_grant_pos[row.key] = row.pos
                passed = [
                    r for r in after.values() if r.key == row.key and r.state == "waiting" and r.pos < row.pos
                ]
                assert not passed, f"a waiter of {row.key} passed over within its key"
        if handed_out:
            free = self.capacity - sum(held.values())
            eligible = [
                r for r in after.values() if r.state == "waiting" and held[r.key] < self.key_capacity[r.key]
            ]
            assert free <= 0 or not eligible, f"a waiter whose key has room still waits: {eligible[:2]}"
        self.rows = after
        self.next_pos = decision.view.next_pos
        for key, view in self.key_views().items():  # the decision's own bookkeeping agrees
            if decision.keys.get(key) is not None:
                assert decision.key_view(key) == view, (key, decision.key_view(key), view)

    def _pick(self, index: int, *states: str) -> slots.SlotRow | None:
        rows = sorted((r for r in self.rows.values() if r.state in states), key=lambda r: r.id)
        return rows[index % len(rows)] if rows else None

    @rule(key_index=st.integers(0, 2))
    def request(self, key_index):
        key = self.keys[key_index % len(self.keys)]
        v = self.view()
        decision = slots.request(
            v, f"s{next(self.ids)}", "run", None, None, self.now, v.waiting == 0, key, self.key_views()[key]
        )
        self.commit(decision, handed_out=False)

    @rule(index=st.integers(0, 50))
    def release(self, index):
        row = self._pick(index, "busy", "reserved")
        if row is not None:
            self.commit(self.grant_heads(slots.release(self.view(), row, self.now)), handed_out=True)

    @rule(index=st.integers(0, 50))
    def confirm(self, index):
        row = self._pick(index, "reserved")
        if row is not None:
            self.commit(self.grant_heads(slots.confirm(self.view(), row, self.now)), handed_out=True)

    @rule(index=st.integers(0, 50))
    def leave(self, index):
        row = self._pick(index, "waiting", "reserved")
        if row is not None:
            self.commit(self.grant_heads(slots.leave(self.view(), row, self.now)), handed_out=True)

    @rule(key_index=st.integers(0, 2), capacity=st.integers(1, 4))
    def set_key_capacity(self, key_index, capacity):
        """An operator's override of one key (it may exceed per_key, never the limit's capacity)."""
        self.key_capacity[self.keys[key_index % len(self.keys)]] = capacity
        self.commit(self.grant_heads(slots.Decision(self.view())), handed_out=True)

    @rule(step=st.sampled_from([1_000, RES + 1]))
    def tick(self, step):
        """Time passes; reservations lapse (requeued last), and the freed slots go on."""
        self.now += step
        due = [r for r in self.rows.values() if r.due_at is not None and r.due_at <= self.now]
        self.commit(self.grant_heads(slots.expire(self.view(), due, self.now)), handed_out=True)

    @invariant()
    def counts_are_bounded(self):
        held = [r for r in self.rows.values() if r.state in ("busy", "reserved")]
        for key in getattr(self, "keys", []):
            in_key = sum(1 for r in held if r.key == key)
            # a lowered override takes no slot back: a key may hold more than its capacity now
            assert in_key <= max(self.key_capacity[key], self.per_key, self.capacity)


TestKeyedSlotMachine = KeyedSlotMachine.TestCase
TestKeyedSlotMachine.settings = settings(max_examples=400, stateful_step_count=50, deadline=None)
