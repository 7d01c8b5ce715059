"""A capacity raise that frees many slots hands them out in bounded transactions (at most
``GRANT_BATCH`` grants each), in queue order, every waiter granted once, on both stores."""

from __future__ import annotations

from duro.definitions._config import LimitConfig
from duro.store import SqlStore, store_call
from duro.store._slots import GRANT_BATCH
from tests.support import store_ops

WAITING = 2 * GRANT_BATCH + 500


def test_a_raise_grants_every_waiter_a_batch_at_a_time(database_url: str):
    store = SqlStore(database_url)
    batches: list[int] = []  # grants per transaction
    try:
        config = LimitConfig("lines", capacity=0, max_hold_ms=60_000)
        for i in range(WAITING):  # no run behind them: a request made outside any run, as an operator's
            row = store_ops.slot_request(store, config, f"s{i:05d}", None, None, None, 1000 + i)
            assert row is not None and row.state == "waiting"
        batch = store.slots._grant_batch  # one call a transaction: count them, and their grants

        def counted(*args):
            decision = batch(*args)
            batches.append(len(decision.granted))
            return decision

        store.slots._grant_batch = counted  # type: ignore[method-assign]
        granted = store.slots.set_override(config, "capacity", WAITING + 10, 50_000)
        assert [row.id for row in granted] == [f"s{i:05d}" for i in range(WAITING)]  # queue order, once each
        assert batches == [GRANT_BATCH, GRANT_BATCH, 500]  # three transactions
        (state,) = [s for name, s in store.limits.states().items() if name == "lines"]
        assert (state.reserved, state.waiting) == (WAITING, 0)
    finally:
        store.close()


def _queue(store: SqlStore, config: LimitConfig, n: int, runs: bool = False) -> None:
    for i in range(n):
        run_id = f"r{i:05d}" if runs else None
        row = store_ops.slot_request(store, config, f"s{i:05d}", run_id, None, None, 1000 + i)
        assert row is not None and row.state == "waiting"


def _count_writes(store: SqlStore) -> list[int]:
    """Write transactions begun, one entry each (both stores: counted at the connector)."""
    begun: list[int] = []
    write = store.db.write

    def counted():
        begun.append(1)
        return write()

    store.db.write = counted  # type: ignore[method-assign]
    return begun


def test_a_capacity_raised_in_the_config_is_handed_out_a_batch_at_a_time(database_url: str):
    store = SqlStore(database_url, decisions_clock="caller")  # instants as given
    try:
        _queue(store, LimitConfig("lines", capacity=0, max_hold_ms=60_000), WAITING)
        raised = {"lines": LimitConfig("lines", capacity=WAITING + 10, max_hold_ms=60_000)}
        begun = _count_writes(store)
        changed, granted = store.slots.expire(raised, 50_000)
        assert [row.id for row in granted] == [f"s{i:05d}" for i in range(WAITING)]
        assert len(begun) == 3  # 1,000 + 1,000 + 500 grants
        assert store.slots.expire(raised, 50_001) == ([], [])
        assert store.limits.states()["lines"].reserved == WAITING
    finally:
        store.close()


def test_lapsed_reservations_expire_a_batch_at_a_time(database_url: str):
    store = SqlStore(database_url, decisions_clock="caller")  # instants as given
    try:
        config = LimitConfig("lines", capacity=0, max_hold_ms=60_000)
        _queue(store, config, WAITING)
        store.slots.set_override(config, "capacity", WAITING, 50_000)
        begun = _count_writes(store)
        later = 50_000 + 10 * 60_000  # every reservation lapsed: requeued, then reserved again
        changed, granted = store.slots.expire({"lines": config}, later)
        assert len({row.id for row in changed}) == WAITING
        assert len(begun) >= 3  # never more than 1,000 expiries (and 1,000 grants) a transaction
        state = store.limits.states()["lines"]
        assert state.reserved + state.waiting == WAITING and state.reserved <= WAITING
    finally:
        store.close()


def test_runs_that_ended_leave_their_queues_a_batch_at_a_time(database_url: str):
    store = SqlStore(database_url, decisions_clock="caller")  # instants as given
    try:
        config = LimitConfig("lines", capacity=0, max_hold_ms=60_000)
        _queue(store, config, WAITING, runs=True)
        begun = _count_writes(store)
        store.slots.leave({"lines": config}, [f"r{i:05d}" for i in range(WAITING)], 50_000)
        assert len(begun) == 3
        assert store.limits.states()["lines"].waiting == 0
        assert {store.slots.get(f"s{i:05d}").state for i in range(WAITING)} == {"cancelled"}
    finally:
        store.close()


def test_the_next_due_slot_is_of_the_limits_asked_about(database_url: str):
    """A worker's expiry pass applies the limits its config declares: a slot of another limit, due
    long ago, must not wake it at once again and again."""
    store = SqlStore(database_url, decisions_clock="caller")  # instants as given
    try:
        for name, timeout in (("gone", 2_000), ("kept", 90_000)):
            config = LimitConfig(name, capacity=0, max_hold_ms=60_000)
            store_ops.slot_request(store, config, f"{name}-1", None, None, timeout, 1000)
        assert store.slots.next_due() == 2_000
        assert store.slots.next_due(None, ["kept"]) == 90_000
        assert store.slots.next_due(None, []) is None
        kept = {"kept": LimitConfig("kept", capacity=0, max_hold_ms=60_000)}
        assert store.slots.expire(kept, 50_000) == ([], [])  # the other limit's slot is left alone
        assert store.slots.get("gone-1").state == "waiting"
    finally:
        store.close()


def test_a_release_beside_a_large_raise_hands_out_one_batch_and_the_pass_the_rest(database_url: str):
    store = SqlStore(database_url, decisions_clock="caller")  # instants as given
    try:
        small = LimitConfig("lines", capacity=1, max_hold_ms=60_000)
        held = store_ops.slot_request(store, small, "held", None, None, None, 500)
        assert held is not None and held.state == "busy"
        _queue(store, small, WAITING)
        raised = {"lines": LimitConfig("lines", capacity=WAITING + 1, max_hold_ms=60_000)}
        _, released, granted = store_ops.slot_release(store, raised, "held", 50_000)
        assert released and len(granted) == GRANT_BATCH  # not the whole raise in one transaction
        changed, rest = store.slots.expire(raised, 50_001)
        assert [row.id for row in granted + rest] == [f"s{i:05d}" for i in range(WAITING)]
    finally:
        store.close()


async def test_an_engine_hands_out_in_a_thread_of_its_own_never_on_the_loop(tmp_path):
    """On SQLite an engine tries a store call on the event loop first; granting many slots
    (many transactions) never is: it runs in its own thread, the writer thread left to the runs."""
    import threading

    from duro import Engine, define_workspace

    url = f"sqlite:///{tmp_path / 'raise.db'}"
    workspace = define_workspace(workflows=[], limits={"lines": {"capacity": 1, "max_hold": "1h"}})
    async with Engine(url, workspace=workspace) as engine:
        store = engine.store
        store_ops.slot_request(store, workspace.limits["lines"], "held", None, None, None, 500)  # busy
        _queue(store, workspace.limits["lines"], WAITING)
        threads: dict[str, str] = {}
        for part, name in ((store.slots, "set_override"), (store.slots, "expire")):
            method = getattr(part, name)

            def seen(*args, _name=name, _method=method):
                threads[_name] = threading.current_thread().name
                return _method(*args)

            seen.store_call = store_call(method)  # marked as the method it stands in for
            setattr(part, name, seen)
        info = await engine.limits.set_capacity("lines", WAITING + 1)
        assert info.effective_capacity == WAITING + 1
        assert threads["set_override"].startswith("duro-db-bulk"), threads
        assert store.limits.states()["lines"].reserved == WAITING
