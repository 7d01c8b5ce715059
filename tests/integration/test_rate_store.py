"""Rates at the store, on SQLite and PostgreSQL: requests queue per (rate, key), each queue's heads
are granted in the request's own transaction when the window allows, else by the pass when the
queue's next due instant comes; timeouts leave the queue; a request is idempotent by its id; and
the window's promise holds over every grant made."""

from __future__ import annotations

import pytest
import sqlalchemy as sa

from duro.definitions._config import check_rate
from duro.store import SqlStore

RATE = check_rate("partner-api", 3, "1m")
TOKENS = check_rate("llm-tokens", 10, "1m", per_key=True)
T0 = 1_000_000


def _store(url: str) -> SqlStore:
    store = SqlStore(url, decisions_clock="caller")  # these tests drive time themselves
    store.create_schema()
    with store._engine.begin() as conn:
        for table in ("duro_rate_waits", "duro_rate_keys", "duro_rates"):
            conn.execute(sa.text(f"DELETE FROM {table}"))
    return store


def test_seven_requests_on_three_a_minute_are_granted_three_three_and_one(database_url):
    store = _store(database_url)
    try:
        outcomes = [store.rates.request(RATE, f"r{n}", None, None, 1, None, T0 + n) for n in range(7)]
        assert [o.wait.state for o in outcomes] == ["granted"] * 3 + ["waiting"] * 4
        assert outcomes[-1].next_due == T0 + 60_000  # the first grant leaves the window
        assert store.rates.next_due(["partner-api"]) == T0 + 60_000
        assert store.rates.due({"partner-api": RATE}, T0 + 59_999).granted == []  # not a millisecond early
        second = store.rates.due({"partner-api": RATE}, T0 + 60_000).granted
        assert [(w.id, w.granted_at) for w in second] == [("r3", T0 + 60_000)]
        assert store.rates.next_due(["partner-api"]) == T0 + 60_001  # r1's grant leaves next
        store.rates.due({"partner-api": RATE}, T0 + 60_001)
        store.rates.due({"partner-api": RATE}, T0 + 60_002)
        assert store.rates.next_due(["partner-api"]) == T0 + 120_000
        last = store.rates.due({"partner-api": RATE}, T0 + 120_000).granted
        assert [w.id for w in last] == ["r6"]
        assert store.rates.next_due(["partner-api"]) is None
        granted = sorted((store.rates.get_wait(f"r{n}").granted_at, n) for n in range(7))
        assert [n for _, n in granted] == list(range(7))  # FIFO
        for at, _ in granted:  # the promise: at most 3 in any window of a minute
            assert sum(1 for other, _ in granted if at <= other < at + 60_000) <= 3
    finally:
        store.close()


def test_a_request_is_idempotent_and_a_timeout_leaves_the_queue(database_url):
    store = _store(database_url)
    try:
        for n in range(3):
            store.rates.request(RATE, f"r{n}", None, None, 1, None, T0)
        waiting = store.rates.request(RATE, "late", None, None, 1, T0 + 10_000, T0)
        assert waiting.wait.state == "waiting"
        again = store.rates.request(RATE, "late", None, None, 1, T0 + 10_000, T0 + 5)
        assert again.wait == waiting.wait and again.granted == ()
        assert store.rates.next_due(["partner-api"]) == T0 + 10_000  # its timeout comes first
        assert store.rates.due({"partner-api": RATE}, T0 + 10_000).granted == []
        assert store.rates.get_wait("late").state == "timed_out"
        assert store.rates.next_due(["partner-api"]) is None
        assert store.rates.request(RATE, "next", None, None, 1, None, T0 + 60_000).wait.state == "granted"
    finally:
        store.close()


def test_keys_have_windows_of_their_own_and_costs_add_up(database_url):
    store = _store(database_url)
    try:
        assert store.rates.request(TOKENS, "a1", None, "tenant:a", 8, None, T0).wait.state == "granted"
        big = store.rates.request(TOKENS, "a2", None, "tenant:a", 5, None, T0 + 1)
        small = store.rates.request(TOKENS, "a3", None, "tenant:a", 1, None, T0 + 2)
        assert (big.wait.state, small.wait.state) == ("waiting", "waiting")  # 1 would fit: FIFO
        assert store.rates.request(TOKENS, "b1", None, "tenant:b", 10, None, T0 + 3).wait.state == "granted"
        granted = store.rates.due({"llm-tokens": TOKENS}, T0 + 60_000).granted
        assert [w.id for w in granted] == ["a2", "a3"]
    finally:
        store.close()


def test_a_grant_and_its_hook_step_are_one_write_fenced_on_the_run(database_url):
    from duro import DuroError
    from duro.store import NewRun, OwnStep, StepRecord

    store = _store(database_url)
    try:
        store.runs.insert(NewRun("run-a", "default", "wf", "1", "{}", "w1", T0), None)
        hook = StepRecord(0, "hook", "rate · partner-api", "waiting", T0)
        granted = store.rates.request(
            RATE, "run-a.0", "run-a", None, 1, None, T0, OwnStep("run-a", "w1", hook)
        )
        assert granted.step is not None and granted.step.status == "completed"
        (written,) = store.steps.of("run-a")
        assert (written.status, written.result) == ("completed", granted.step.result)
        assert f'"granted_at": {T0}' in written.result
        with pytest.raises(DuroError, match="no longer owned"):  # not this worker's run: nothing written
            store.rates.request(
                RATE, "run-a.1", "run-a", None, 1, None, T0, OwnStep("run-a", "w2", hook._replace(seq=1))
            )
        assert store.rates.get_wait("run-a.1") is None
    finally:
        store.close()


def test_a_pause_holds_every_grant_until_it_ends_and_a_resume_lets_them_go(database_url):
    store = _store(database_url)
    try:
        store.rates.declare([RATE], T0)
        assert store.rates.pause("partner-api", None, T0 + 30_000, T0) == T0 + 30_000
        # a 429's shorter pause never shortens the one set
        assert store.rates.pause("partner-api", None, T0 + 10_000, T0, True) == T0 + 30_000
        held = store.rates.request(RATE, "r0", None, None, 1, None, T0 + 1)
        assert held.wait.state == "waiting" and held.next_due == T0 + 30_000
        assert store.rates.due({"partner-api": RATE}, T0 + 29_999).granted == []
        assert [w.id for w in store.rates.due({"partner-api": RATE}, T0 + 30_000).granted] == ["r0"]
        store.rates.pause("partner-api", None, T0 + 90_000, T0 + 30_000)
        assert store.rates.request(RATE, "r1", None, None, 1, None, T0 + 30_001).wait.state == "waiting"
        store.rates.pause("partner-api", None, None, T0 + 40_000)  # resumed: due at once
        assert [w.id for w in store.rates.due({"partner-api": RATE}, T0 + 40_000).granted] == ["r1"]
        (state,) = store.rates.states(T0 + 40_000)
        assert (state.limit, state.per_ms, state.paused_until, state.granted, state.waiting) == (
            3,
            60_000,
            None,
            2,
            0,
        )
    finally:
        store.close()


def test_a_key_paused_holds_only_its_own_queue(database_url):
    store = _store(database_url)
    try:
        store.rates.pause("llm-tokens", "tenant:a", T0 + 60_000, T0, True)
        assert store.rates.request(TOKENS, "a1", None, "tenant:a", 1, None, T0).wait.state == "waiting"
        assert store.rates.request(TOKENS, "b1", None, "tenant:b", 1, None, T0).wait.state == "granted"
        assert store.rates.key_state("llm-tokens", "tenant:a", TOKENS.per_ms, T0) == (0, 1, T0 + 60_000)
        assert [w.id for w in store.rates.due({"llm-tokens": TOKENS}, T0 + 60_000).granted] == ["a1"]
    finally:
        store.close()


def test_a_waiter_that_gives_up_or_whose_run_ends_lets_the_next_go(database_url):
    store = _store(database_url)
    try:
        store.rates.request(RATE, "r0", "run-0", None, 3, None, T0)
        store.rates.request(RATE, "big", "run-big", None, 3, None, T0)
        store.rates.request(RATE, "r2", "run-2", None, 1, None, T0)
        store.rates.request(RATE, "r3", "run-3", None, 1, None, T0)
        assert store.rates.set_limit(RATE, 4, T0) is None  # big (3) still does not fit beside r0 (3)
        assert store.rates.due({"partner-api": RATE}, T0).granted == []
        gave_up = store.rates.give_up(RATE, "big", T0 + 1)
        assert gave_up.wait.state == "timed_out"
        assert [w.id for w in gave_up.granted] == ["r2"]  # 3 + 1 fit the override of 4
        store.rates.set_limit(RATE, 5, T0 + 2)
        assert [w.id for w in store.rates.leave({"partner-api": RATE}, ["run-x"], T0 + 2)] == []
        assert store.rates.due({"partner-api": RATE}, T0 + 2).granted[0].id == "r3"
        store.rates.request(RATE, "r4", "run-4", None, 1, None, T0 + 3)
        store.rates.request(RATE, "r5", "run-5", None, 1, None, T0 + 3)
        assert store.rates.leave({"partner-api": RATE}, ["run-4"], T0 + 4) == []  # r5 still over 5
        assert store.rates.get_wait("r4").state == "left"
        assert [w.id for w in store.rates.waiters("partner-api", None, 10)] == ["r5"]
        assert store.rates.give_up(RATE, "r3", T0 + 5).wait.state == "granted"  # granted: kept
    finally:
        store.close()


def test_a_decision_judged_at_an_instant_before_the_last_grant_still_counts_it(database_url):
    """A transaction that read its clock, then waited for the queue's lock while another committed
    grants, judges at the queue's last decision: the grants it waited behind stay in its window."""
    store = _store(database_url)
    try:
        for n in range(3):
            assert store.rates.request(RATE, f"r{n}", None, None, 1, None, T0 + 10).wait.state == "granted"
        late = store.rates.request(RATE, "stale", None, None, 1, None, T0)  # its clock read before them
        assert late.wait.state == "waiting" and late.next_due == T0 + 10 + 60_000
        assert late.wait.enqueued_at == T0 + 10
    finally:
        store.close()


def test_ended_waits_past_every_window_are_pruned_and_an_unfinished_runs_kept(database_url):
    from duro.store import NewRun

    store = _store(database_url)
    try:
        store.runs.insert(NewRun("live", "default", "wf", "1", "{}", "w1", T0), None)
        store.rates.request(RATE, "live.0", "live", None, 1, None, T0)
        store.rates.request(RATE, "gone.0", None, None, 1, None, T0)
        store.rates.request(RATE, "late", None, None, 1, T0 + 1_000, T0)
        store.rates.give_up(RATE, "late", T0 + 1_000)  # timed out
        assert store.rates.prune({"partner-api": RATE}, T0 + 60_000) == 0  # within the margin yet
        assert store.rates.prune({"partner-api": RATE}, T0 + 121_001) == 2
        assert store.rates.get_wait("gone.0") is None and store.rates.get_wait("late") is None
        assert store.rates.get_wait("live.0").state == "granted"  # its run may still replay it
        assert store.rates.request(RATE, "next", None, None, 1, None, T0 + 121_001).wait.state == "granted"
    finally:
        store.close()
