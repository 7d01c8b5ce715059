"""A hypothesis state machine drives a keyed limit through the real store (SQLite and PostgreSQL):
requests over three keys, releases, confirmations, time passing (expiries, lapses, timeouts), the
limit's capacity and a key's capacity overridden, and ``per_key`` changed in the config (keyed to
another size, to plain, and back: slots without a key then wait in a keyed limit). After every step
the store's keys are checked against its slots: each key's counts, the position of its oldest
waiter while it has room (what a grant pass reads first), no key row with counts but no slots;
the limit's counts; and no waiter left waiting that could be granted (its key and the limit have
room). The grant rule's order is checked against a reference model in the unit tests."""

from __future__ import annotations

import itertools
from collections import Counter

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
from duro.store import ConfirmSlot, ReleaseSlot, RequestSlot, SqlStore

KEYS = ("a", "b", "c")
NAME = "api"


def make_machine(url: str):
    class KeyedStoreMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.store = _fresh_store(url)
            self.config = LimitConfig(NAME, capacity=4, max_hold_ms=60_000, per_key=1)
            self.capacity = 4
            self.overrides: dict[str, int] = {}
            self.now = 1_000
            self.ids = (f"s{i}" for i in itertools.count())
            self.known: list[str] = []

        def teardown(self) -> None:
            self.store.close()

        @rule(key=st.sampled_from(KEYS), timeout=st.sampled_from([20_000, 200_000, 10_000_000]))
        def request(self, key: str, timeout: int) -> None:
            slot_id = next(self.ids)
            self.known.append(slot_id)
            keyed = key if self.config.per_key is not None else None
            self.store.steps.apply(
                RequestSlot(self.config, slot_id, None, None, self.now + timeout, self.now, None, keyed)
            )

        @precondition(lambda self: self.known)
        @rule(pick=st.integers(min_value=0, max_value=10_000))
        def release(self, pick: int) -> None:
            slot_id = self.known[pick % len(self.known)]
            self.store.steps.apply(ReleaseSlot({NAME: self.config}, slot_id, self.now))

        @precondition(lambda self: self.known)
        @rule(pick=st.integers(min_value=0, max_value=10_000))
        def confirm(self, pick: int) -> None:
            self.store.steps.apply(ConfirmSlot(self.config, self.known[pick % len(self.known)], self.now))

        @rule(ms=st.sampled_from([1_000, 30_000, 61_000, 130_000]))
        def time_passes(self, ms: int) -> None:
            self.now += ms
            self.store.slots.expire({NAME: self.config}, self.now)

        @rule(capacity=st.integers(min_value=1, max_value=5))
        def set_capacity(self, capacity: int) -> None:
            self.store.slots.set_override(self.config, "capacity", capacity, self.now)
            self.capacity = capacity

        @precondition(lambda self: self.config.per_key is not None)
        @rule(key=st.sampled_from(KEYS), capacity=st.sampled_from([None, 1, 2, 3]))
        def set_key_capacity(self, key: str, capacity: int | None) -> None:
            self.store.slots.set_key_override(self.config, key, capacity, self.now)
            if capacity is None:
                self.overrides.pop(key, None)
            else:
                self.overrides[key] = capacity

        @rule(per_key=st.sampled_from([None, 1, 2]))
        def reload(self, per_key: int | None) -> None:
            """duro.config.py changed; the 15 s pass hands out what the new per_key allows."""
            self.config = LimitConfig(NAME, capacity=4, max_hold_ms=60_000, per_key=per_key)
            self.store.slots.expire({NAME: self.config}, self.now)

        @invariant()
        def keys_match_the_slots(self) -> None:
            rows = self.store.limits.slots(NAME)
            counts = self.store.limits.states().get(NAME)
            if counts is not None:
                by_state = Counter(row.state for row in rows)
                assert (counts.busy, counts.reserved, counts.waiting) == (
                    by_state["busy"],
                    by_state["reserved"],
                    by_state["waiting"],
                )
            per_key = self.config.per_key
            stored = _key_rows(self.store)
            if per_key is None:
                assert all(row[:3] == (0, 0, 0) for row in stored.values()), stored
                return
            expected: dict[str, list] = {}
            for row in rows:
                found = expected.setdefault(row.key or "", [0, 0, 0, None])
                found[("busy", "reserved", "waiting").index(row.state)] += 1
                if row.state == "waiting" and (found[3] is None or row.pos < found[3]):
                    found[3] = row.pos
            for key in self.overrides:
                expected.setdefault(key, [0, 0, 0, None])
            for key, (busy, reserved, waiting, head) in expected.items():
                cap = self.overrides.get(key, per_key)
                has_room = key == "" or busy + reserved < cap
                assert stored.get(key) == (busy, reserved, waiting, head if has_room else None), (key, stored)
            idle = {key: stored[key] for key in set(stored) - set(expected)}  # kept until pruned
            assert all(row == (0, 0, 0, None) for row in idle.values()), (stored, expected)
            limit_free = self.capacity - sum(1 for row in rows if row.state in ("busy", "reserved"))
            if limit_free > 0:
                for row in rows:
                    if row.state == "waiting":
                        key = row.key or ""
                        busy, reserved = expected[key][:2]
                        assert key != "" and busy + reserved >= self.overrides.get(key, per_key), (
                            f"{row.id} of key {key!r} waits with room for it",
                            rows,
                        )

    return KeyedStoreMachine


def _key_rows(store: SqlStore) -> dict[str, tuple]:
    with store._engine.connect() as conn:
        found = conn.execute(
            sa.text(
                "SELECT limit_key, busy, reserved, waiting, open_pos FROM duro_limit_keys "
                "WHERE limit_name = :name"
            ),
            {"name": NAME},
        ).fetchall()
    return {key: (busy, reserved, waiting, open_pos) for key, busy, reserved, waiting, open_pos in found}


def _fresh_store(url: str) -> SqlStore:
    store = SqlStore(url, decisions_clock="caller")  # the machine drives time itself
    store.create_schema()
    with store._engine.begin() as conn:
        for table in ("duro_slots", "duro_limits", "duro_limit_keys"):
            conn.execute(sa.text(f"DELETE FROM {table}"))
    return store


def test_a_keyed_limits_keys_stay_true_to_its_slots(database_url):
    run_state_machine_as_test(
        make_machine(database_url),
        settings=settings(
            max_examples=100 if database_url.startswith("sqlite") else 30,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
            database=None,
        ),
    )


def test_an_idle_keys_row_is_pruned_by_the_expiry_pass_and_an_overridden_one_kept(database_url):
    store = _fresh_store(database_url)
    try:
        config = LimitConfig(NAME, capacity=4, max_hold_ms=60_000, per_key=1)
        for key in ("a", "b"):
            store.steps.apply(RequestSlot(config, f"s-{key}", None, None, None, 1_000, None, key))
            store.steps.apply(ReleaseSlot({NAME: config}, f"s-{key}", 1_000))
        store.slots.set_key_override(config, "b", 3, 1_000)
        assert _key_rows(store) == {"a": (0, 0, 0, None), "b": (0, 0, 0, None)}  # idle, kept a while
        assert [key[0] for key in store.limits.keys(config)] == ["b"]  # listed: the override only
        store.slots.expire({NAME: config}, 2_000)  # the first pass prunes
        assert _key_rows(store) == {"b": (0, 0, 0, None)}
        store.steps.apply(RequestSlot(config, "s-a2", None, None, None, 3_000, None, "a"))
        store.steps.apply(ReleaseSlot({NAME: config}, "s-a2", 3_000))
        store.slots.expire({NAME: config}, 30_000)  # within a minute of the last prune: not again
        assert set(_key_rows(store)) == {"a", "b"}
        store.slots.expire({NAME: config}, 70_000)
        assert set(_key_rows(store)) == {"b"}
    finally:
        store.close()
