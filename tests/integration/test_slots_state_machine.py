"""A hypothesis state machine drives the real store's slot transactions (which apply the pure
decisions of ``duro.rules._slots``) and checks them against a simple reference model, on SQLite and on
PostgreSQL. Invariants: busy + reserved <= capacity at every grant, FIFO grant order, a second
release is a no-op, a released reservation goes back to the queue as a lapsed one does, no slot in
two states, the limit's counts equal its rows."""

from __future__ import annotations

import itertools

import sqlalchemy as sa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from duro.definitions._config import LimitConfig
from duro.rules._slots import RESERVATION_MS
from duro.store import SqlStore
from tests.support import store_ops

MAX_HOLD = 60_000


class Model:
    """The reference: a capacity, a FIFO list of waiters, and sets of reserved and busy slots."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.queue: list[str] = []
        self.reserved: dict[str, int] = {}  # id -> reserved_until
        self.busy: dict[str, int] = {}  # id -> expires_at
        self.timeouts: dict[str, int] = {}
        self.ended: set[str] = set()
        self.grant_order: list[str] = []
        self.pos: dict[str, int] = {}  # queue position: given at request and again at a requeue
        self.next_pos = 0

    def place(self, slot_id: str) -> None:
        self.pos[slot_id] = self.next_pos
        self.next_pos += 1

    def free(self) -> int:
        return self.capacity - len(self.busy) - len(self.reserved)

    def grant_heads(self, now: int) -> None:
        while self.free() > 0 and self.queue:
            head = self.queue.pop(0)
            assert len(self.busy) + len(self.reserved) < self.capacity
            self.reserved[head] = now + RESERVATION_MS
            self.grant_order.append(head)

    def request(self, slot_id: str, now: int, timeout_at: int) -> None:
        self.timeouts[slot_id] = timeout_at
        self.place(slot_id)
        if not self.queue and self.free() > 0:
            self.busy[slot_id] = now + MAX_HOLD
            self.grant_order.append(slot_id)
        else:
            self.queue.append(slot_id)

    def release(self, slot_id: str, now: int) -> bool:
        if self.busy.pop(slot_id, None) is not None:
            self.ended.add(slot_id)
        elif self.reserved.pop(slot_id, None) is not None:
            self.requeue(slot_id, now)  # a reservation released: as if it had lapsed, never a false timeout
        else:
            return False
        self.grant_heads(now)
        return True

    def requeue(self, slot_id: str, now: int) -> None:
        if self.timeouts[slot_id] <= now:
            self.ended.add(slot_id)
        else:
            self.queue.append(slot_id)
            self.place(slot_id)

    def confirm(self, slot_id: str, now: int) -> None:
        until = self.reserved.get(slot_id)
        if until is None:
            return
        if until > now:
            del self.reserved[slot_id]
            self.busy[slot_id] = now + MAX_HOLD
        else:
            self.expire(now)

    def expire(self, now: int) -> None:
        # due at the same instant: in queue order (position), as the store does
        due = sorted(
            [(t, self.pos[s], "busy", s) for s, t in self.busy.items() if t <= now]
            + [(t, self.pos[s], "reserved", s) for s, t in self.reserved.items() if t <= now]
            + [(self.timeouts[s], self.pos[s], "waiting", s) for s in self.queue if self.timeouts[s] <= now]
        )
        for _, _, state, slot_id in due:
            if state == "busy":
                del self.busy[slot_id]
                self.ended.add(slot_id)
            elif state == "reserved":
                del self.reserved[slot_id]
                self.requeue(slot_id, now)
            else:
                self.queue.remove(slot_id)
                self.ended.add(slot_id)
        self.grant_heads(now)


def make_machine(url: str, fresh):
    class SlotMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.store: SqlStore = fresh(url)
            self.config = LimitConfig("bench", capacity=2, max_hold_ms=MAX_HOLD)
            self.configs = {"bench": self.config}
            self.model = Model(2)
            self.now = 1_000
            self.ids = (f"s{i}" for i in itertools.count())
            self.known: list[str] = []

        def teardown(self) -> None:
            self.store.close()

        @rule(timeout=st.sampled_from([10_000, 200_000, 10_000_000]))
        def request(self, timeout: int) -> None:
            slot_id = next(self.ids)
            self.known.append(slot_id)
            store_ops.slot_request(self.store, self.config, slot_id, None, None, self.now + timeout, self.now)
            self.model.request(slot_id, self.now, self.now + timeout)

        @precondition(lambda self: self.known)
        @rule(pick=st.integers(min_value=0, max_value=10_000))
        def release(self, pick: int) -> None:
            slot_id = self.known[pick % len(self.known)]
            _, released, _ = store_ops.slot_release(self.store, self.configs, slot_id, self.now)
            assert released == self.model.release(slot_id, self.now)

        @precondition(lambda self: self.model.reserved)
        @rule(pick=st.integers(min_value=0, max_value=10_000))
        def confirm(self, pick: int) -> None:
            slot_id = sorted(self.model.reserved)[pick % len(self.model.reserved)]
            store_ops.slot_confirm(self.store, self.config, slot_id, self.now)
            self.model.confirm(slot_id, self.now)

        @rule(ms=st.sampled_from([1_000, 30_000, 61_000, 130_000]))
        def time_passes(self, ms: int) -> None:
            self.now += ms
            self.store.slots.expire(self.configs, self.now)
            self.model.expire(self.now)

        @rule(capacity=st.integers(min_value=1, max_value=4))
        def set_capacity(self, capacity: int) -> None:
            self.store.slots.set_override(self.config, "capacity", capacity, self.now)
            self.model.capacity = capacity
            self.model.grant_heads(self.now)

        @invariant()
        def store_matches_model(self) -> None:
            rows = self.store.limits.slots("bench")
            states = {row.id: row.state for row in rows}
            assert len(states) == len(rows)  # no slot twice
            assert [r.id for r in rows if r.state == "waiting"] == self.model.queue  # FIFO
            assert {r.id for r in rows if r.state == "reserved"} == set(self.model.reserved)
            assert {r.id for r in rows if r.state == "busy"} == set(self.model.busy)
            for slot_id in self.model.ended:
                assert slot_id not in states
            counts = self.store.limits.states().get("bench")
            if counts is not None:
                assert (counts.busy, counts.reserved, counts.waiting) == (
                    len(self.model.busy),
                    len(self.model.reserved),
                    len(self.model.queue),
                )

    return SlotMachine


def _fresh_store(url: str) -> SqlStore:
    store = SqlStore(url, decisions_clock="caller")  # the model drives time itself
    store.create_schema()
    with store._engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM duro_slots"))
        conn.execute(sa.text("DELETE FROM duro_limits"))
    return store


def test_slot_decisions_through_the_real_store_match_the_reference_model(database_url):
    machine = make_machine(database_url, _fresh_store)
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=120 if database_url.startswith("sqlite") else 40,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            database=None,
        ),
    )
