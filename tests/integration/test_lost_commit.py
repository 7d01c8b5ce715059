"""A slot operation whose ``COMMIT`` reached the server, committed, and whose answer never came back
(the server restarting as it commits, the network cut): the worker must not decide again as if
nothing had happened. Made real by a proxy that forwards the ``COMMIT``, waits for the server to
answer it and cuts the connection instead of passing the answer on.

Before the store asked the server what became of such a transaction, the call was simply made again:
a release then found its slot already released and recorded ``{"released": false}`` over the step
that had released it, and a granted request came back without its completed hook step."""

from __future__ import annotations

import json

import pytest

from duro._hooks import EngineHooks
from duro.definitions._config import LimitConfig
from duro.store import OwnStep, ReleaseSlot, RequestSlot, StepRecord, Store
from duro.worker._gateway import StoreGateway
from tests.integration.store_contract._support import new_run
from tests.support.losing_proxy import LosingProxy

pytestmark = pytest.mark.postgres

LINES = LimitConfig(name="lines", capacity=1, max_hold_ms=3_600_000)


@pytest.fixture
def proxied(pg_server, postgres_url):
    with LosingProxy(pg_server.port) as proxy:
        store = Store(proxy.url(postgres_url.rsplit("/", 1)[1]), decisions_clock="caller")
        store.create_schema()
        try:
            yield proxy, store
        finally:
            store.close()


def hook(seq: int, now: int) -> StepRecord:
    return StepRecord(seq, "hook", "Esperando hueco · lines", "waiting", now)


def release_step(seq: int, now: int, slot_id: str) -> StepRecord:
    return StepRecord(
        seq, "release", "release_slot", "completed", now, now, detail=json.dumps({"slot_id": slot_id})
    )


async def test_a_granted_request_whose_commit_answer_is_lost_comes_back_granted_with_its_step(proxied):
    proxy, store = proxied
    gateway = StoreGateway(store, EngineHooks())
    store.runs.insert(new_run("r1", owner="w1"), None)
    proxy.lose_next_commit_answer()
    outcome = await gateway.apply(
        RequestSlot(LINES, "r1.0", "r1", "a", None, 1000, OwnStep("r1", "w1", hook(0, 1000)))
    )
    assert proxy.lost.is_set(), "the proxy lost no answer: the test did not test anything"
    assert outcome.row is not None and outcome.row.state == "busy"
    assert outcome.step is not None and outcome.step.status == "completed"
    stored = {step.seq: step for step in store.steps.of("r1")}
    assert stored[0].status == "completed"
    gateway.close()


async def test_a_release_whose_commit_answer_is_lost_is_recorded_as_released_once(proxied):
    proxy, store = proxied
    gateway = StoreGateway(store, EngineHooks())
    store.runs.insert(new_run("r1", owner="w1"), None)
    granted = await gateway.apply(
        RequestSlot(LINES, "r1.0", "r1", "a", None, 1000, OwnStep("r1", "w1", hook(0, 1000)))
    )
    assert granted.row is not None and granted.row.state == "busy"
    proxy.lose_next_commit_answer()
    released = await gateway.apply(
        ReleaseSlot(
            {"lines": LINES}, "r1.0", 2000, "release", OwnStep("r1", "w1", release_step(1, 2000, "r1.0"))
        )
    )
    assert proxy.lost.is_set(), "the proxy lost no answer: the test did not test anything"
    assert released.released is True
    stored = {step.seq: step for step in store.steps.of("r1")}
    assert json.loads(stored[1].result or "{}") == {"released": True}
    slot = store.slots.get("r1.0")
    assert slot is not None and slot.state == "released"
    gateway.close()
