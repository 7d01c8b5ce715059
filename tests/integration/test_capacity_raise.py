"""A capacity raise that frees many slots hands them out in bounded transactions (at most
``HAND_OUT_BATCH`` grants each), in queue order, every waiter granted once, on both stores."""

from __future__ import annotations

from duro._config import LimitConfig
from duro.store import SqlStore
from duro.store._slots import HAND_OUT_BATCH
from tests.support import store_ops

WAITING = 2 * HAND_OUT_BATCH + 500


def test_a_raise_grants_every_waiter_a_batch_at_a_time(database_url: str):
    store = SqlStore(database_url)
    batches: list[int] = []  # grants per transaction
    try:
        config = LimitConfig("lines", capacity=0, max_hold_ms=60_000)
        for i in range(WAITING):  # no run behind them: a request made outside any run, as an operator's
            row = store_ops.slot_request(store, config, f"s{i:05d}", None, None, None, 1000 + i)
            assert row is not None and row.state == "waiting"
        batch = store._slots._batch  # one call a transaction: count them, and their grants

        def counted(*args):
            decision = batch(*args)
            batches.append(len(decision.granted))
            return decision

        store._slots._batch = counted
        granted = store.set_limit_override(config, "capacity", WAITING + 10, 50_000)
        assert [row.id for row in granted] == [f"s{i:05d}" for i in range(WAITING)]  # queue order, once each
        assert batches == [HAND_OUT_BATCH, HAND_OUT_BATCH, 500]  # three transactions
        (state,) = [s for name, s in store.limit_states().items() if name == "lines"]
        assert (state.reserved, state.waiting) == (WAITING, 0)
    finally:
        store.close()
