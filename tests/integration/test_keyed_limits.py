"""Keyed limits: a capacity per key inside one limit ("5 open sessions per account, 200 in all").
A slot goes to the oldest waiter whose key has room while the limit has room; a key at its capacity
never holds up the waiters of other keys; within a key the queue is FIFO. In the harness (both
residencies), and the grant rule on a real engine on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from duro import (
    DuroError,
    Engine,
    Limit,
    RunFailedError,
    SlotTimeoutError,
    acquire_slot,
    define_workspace,
    limit_slot,
    step,
    wait_for_signal,
    workflow,
)
from tests.support.waiting import eventually

LIMITS = {
    "partner-api": {"capacity": 3, "per_key": 2, "max_hold": "1h"},
    "plain": {"capacity": 1, "max_hold": "1h"},
}
pytestmark = pytest.mark.duro(config={"limits": LIMITS})


@step
async def work(job: str) -> str:
    return job


@workflow(name="keyed.session")
async def session(job: dict) -> str:
    """Holds a partner-api slot of its account until signalled ``done``."""
    async with limit_slot("partner-api", key=f"account:{job['account']}", label=job["id"]) as slot:
        await work(job["id"])
        await wait_for_signal("done")
    return f"{slot.key} {slot.label}"


@workflow(name="keyed.patient")
async def patient(job: dict) -> str:
    try:
        slot = await acquire_slot("partner-api", key=f"account:{job['account']}", timeout=job["timeout"])
    except SlotTimeoutError:
        return "timed out"
    return slot.key or ""


@workflow(name="keyed.unkeyed")
async def unkeyed(limit: str) -> str:
    await acquire_slot(limit)
    return "granted"


@workflow(name="keyed.wrongly")
async def wrongly(limit: str) -> str:
    await acquire_slot(limit, key="account:a")
    return "granted"


def job(account: str, n: int) -> dict:
    return {"account": account, "id": f"{account}{n}"}


async def test_a_key_at_its_capacity_never_holds_up_another_key(duro_env):
    a1, a2, a3 = [await duro_env.start(session, job("a", n), run_id=f"a{n}") for n in (1, 2, 3)]
    b1 = await duro_env.start(session, job("b", 1), run_id="b1")
    await duro_env.run_until_idle()
    await duro_env.assert_limit("partner-api", busy=3, waiting=1)
    await duro_env.assert_limit("partner-api", busy=2, waiting=1, key="account:a")
    await duro_env.assert_limit("partner-api", busy=1, waiting=0, key="account:b")
    assert await duro_env.queue("partner-api") == ["a3"]
    await a1.signal("done")
    await duro_env.run_until_idle()
    assert await a1.result() == "account:a a1"
    await duro_env.assert_limit("partner-api", busy=2, waiting=0, key="account:a")  # a3 took a1's slot
    for run in (a2, a3, b1):
        await run.signal("done")
    assert [await r.result() for r in (a2, a3, b1)] == ["account:a a2", "account:a a3", "account:b b1"]
    await duro_env.assert_limit("partner-api", busy=0, waiting=0)


async def test_the_oldest_waiter_whose_key_has_room_wins_a_freed_slot(duro_env):
    runs = {}
    for account, n in (("a", 1), ("a", 2), ("b", 1), ("a", 3), ("b", 2), ("c", 1)):
        runs[f"{account}{n}"] = await duro_env.start(session, job(account, n), run_id=f"{account}{n}")
        await duro_env.run_until_idle()
    await duro_env.assert_limit("partner-api", busy=3, waiting=3)
    assert await duro_env.queue("partner-api") == ["a3", "b2", "c1"]
    await runs["b1"].signal("done")  # frees one slot: a3's key is full, b2 is the oldest with room
    await duro_env.run_until_idle()
    assert await duro_env.queue("partner-api") == ["a3", "c1"]
    await duro_env.assert_limit("partner-api", busy=1, waiting=0, key="account:b")
    await runs["a1"].signal("done")  # account a has room again: a3, older than c1, takes it
    await duro_env.run_until_idle()
    assert await duro_env.queue("partner-api") == ["c1"]
    await duro_env.assert_limit("partner-api", busy=2, waiting=0, key="account:a")


async def test_each_keys_queue_survives_a_restart_and_a_timeout_leaves_only_its_own(duro_env):
    holders = [await duro_env.start(session, job("a", n), run_id=f"a{n}") for n in (1, 2)]
    await duro_env.start(session, job("b", 1), run_id="b1")
    await duro_env.run_until_idle()
    late = await duro_env.start(patient, {"account": "a", "timeout": "10m"}, run_id="a-late")
    waiting = await duro_env.start(session, job("a", 3), run_id="a3")
    c1 = await duro_env.start(session, job("c", 1), run_id="c1")
    await duro_env.run_until_idle()
    assert await duro_env.queue("partner-api", key="account:a") == ["a-late", "a3"]
    await duro_env.restart()
    await duro_env.advance("10m")
    assert await late.result() == "timed out"
    assert await duro_env.queue("partner-api", key="account:a") == ["a3"]
    assert await duro_env.queue("partner-api") == ["a3", "c1"]
    await holders[0].signal("done")
    await duro_env.run_until_idle()
    assert await duro_env.queue("partner-api") == ["c1"]
    await duro_env.assert_limit("partner-api", busy=2, waiting=0, key="account:a")
    assert await waiting.status() == "suspended"  # holds its slot, waiting for "done"
    assert await c1.status() == "running"  # queued for a slot: a waiting run stays running


async def test_a_keyed_limit_asks_for_a_key_and_a_plain_one_refuses_it(duro_env):
    missing = await duro_env.start(unkeyed, "partner-api")
    extra = await duro_env.start(wrongly, "plain")
    await duro_env.run_until_idle()
    with pytest.raises(RunFailedError) as failed:
        await missing.result()
    assert isinstance(failed.value.cause, DuroError)
    assert "limit 'partner-api' is keyed" in str(failed.value.cause) and "key=" in str(failed.value.cause)
    with pytest.raises(RunFailedError) as failed:
        await extra.result()
    assert "limit 'plain' has no keys" in str(failed.value.cause)
    await duro_env.assert_limit("partner-api", busy=0, waiting=0)
    await duro_env.assert_limit("plain", busy=0, waiting=0)


def test_per_key_is_checked_when_the_config_loads():
    from duro import ConfigError

    with pytest.raises(
        ConfigError, match="limit 'p': per_key must be an integer from 1 to the limit's capacity"
    ):
        define_workspace(limits={"p": Limit(capacity=3, max_hold="1h", per_key=4)})
    with pytest.raises(ConfigError, match="per_key"):
        define_workspace(limits={"p": {"capacity": 3, "max_hold": "1h", "per_key": 0}})
    assert (
        define_workspace(limits={"p": Limit(capacity=3, max_hold="1h", per_key=3)}).limits["p"].per_key == 3
    )


async def test_the_grant_rule_on_a_real_store(database_url):
    engine = Engine(database_url, workspace=define_workspace(limits=LIMITS))
    engine.register(session)
    async with engine:
        runs = {}
        for account, n in (("a", 1), ("a", 2), ("b", 1), ("a", 3), ("b", 2), ("c", 1)):
            runs[f"{account}{n}"] = await engine.start(
                "keyed.session", job(account, n), run_id=f"{account}{n}"
            )
            await _until(engine, f"{account}{n}")
        assert await _queue(engine) == ["a3", "b2", "c1"]
        await runs["b1"].signal("done")
        assert await runs["b1"].result(timeout="10s") == "account:b b1"
        await _until(engine, "b2", held=True)
        assert await _queue(engine) == ["a3", "c1"]
        await runs["a1"].signal("done")
        assert await runs["a1"].result(timeout="10s") == "account:a a1"
        await _until(engine, "a3", held=True)
        assert await _queue(engine) == ["c1"]
        for name in ("a2", "a3", "b2"):
            await runs[name].signal("done")
        await _until(engine, "c1", held=True)
        for name in ("a2", "a3", "b2"):
            assert await runs[name].result(timeout="10s")
        await runs["c1"].signal("done")
        assert await runs["c1"].result(timeout="10s") == "account:c c1"


async def _queue(engine: Engine) -> list[str | None]:
    return [s.run_id for s in await engine.limits.slots("partner-api") if s.state == "waiting"]


async def _until(engine: Engine, run_id: str, held: bool = False) -> None:
    """The run's slot request is in the store (held, if ``held``)."""

    async def there() -> bool:
        slots = {s.run_id: s.state for s in await engine.limits.slots("partner-api")}
        return run_id in slots and (not held or slots[run_id] in ("busy", "reserved"))

    await eventually(there, what=f"{run_id}'s slot request")


async def test_a_keys_capacity_override_grants_at_once_and_survives_a_restart(duro_env):
    a1, a2, a3 = [await duro_env.start(session, job("a", n), run_id=f"a{n}") for n in (1, 2, 3)]
    await duro_env.run_until_idle()
    await duro_env.assert_limit("partner-api", busy=2, waiting=1, key="account:a")  # the limit has room
    raised = await duro_env.engine.limits.set_key_capacity("partner-api", "account:a", 3)
    assert (raised.key, raised.capacity, raised.overridden) == ("account:a", 3, True)
    await duro_env.run_until_idle()
    await duro_env.assert_limit("partner-api", busy=3, waiting=0, key="account:a")  # granted at once
    await duro_env.restart()
    (listed,) = await duro_env.engine.limits.keys("partner-api")
    assert (listed.key, listed.capacity, listed.overridden, listed.busy) == ("account:a", 3, True, 3)
    lowered = await duro_env.engine.limits.set_key_capacity("partner-api", "account:a", None)  # reset
    assert (lowered.capacity, lowered.overridden, lowered.busy) == (2, False, 3)  # takes no slot back
    for run in (a1, a2, a3):
        await run.signal("done")
    assert [await r.result() for r in (a1, a2, a3)] == ["account:a a1", "account:a a2", "account:a a3"]
    assert await duro_env.engine.limits.keys("partner-api") == []


async def test_keys_are_listed_busiest_first_and_a_plain_limit_has_none(duro_env):
    for account, n in (("b", 1), ("a", 1), ("a", 2), ("c", 1)):
        await duro_env.start(session, job(account, n), run_id=f"{account}{n}")
    await duro_env.start(session, job("c", 2), run_id="c2")  # the limit is full: c2 waits
    await duro_env.run_until_idle()
    keys = await duro_env.engine.limits.keys("partner-api")
    assert [(k.key, k.busy + k.reserved, k.waiting) for k in keys] == [
        ("account:a", 2, 0),
        ("account:b", 1, 0),
        ("account:c", 0, 2),
    ]
    with pytest.raises(DuroError, match="limit 'plain' has no keys"):
        await duro_env.engine.limits.keys("plain")
    with pytest.raises(DuroError, match="capacity must be an integer from 1"):
        await duro_env.engine.limits.set_key_capacity("partner-api", "account:a", 0)


async def test_a_client_engine_the_api_and_the_metrics_see_the_keys(database_url):
    from prometheus_client import CollectorRegistry

    from duro.metrics import collector

    worker = Engine(database_url, workspace=define_workspace(limits=LIMITS))
    worker.register(session)
    registry = CollectorRegistry()
    registry.register(collector(worker))
    async with worker:
        runs = [await worker.start("keyed.session", job("a", n), run_id=f"a{n}") for n in (1, 2, 3)]
        await _until(worker, "a3")
        assert registry.get_sample_value("duro_limit_keys", {"limit": "partner-api"}) == 1
        assert registry.get_sample_value("duro_limit_keys_full", {"limit": "partner-api"}) == 1
        client = Engine(database_url)  # no workspace: the store's declaration, per_key included
        try:
            await _client_sees_the_keys(client)
        finally:
            await client.aclose()
        await _until(worker, "a3", held=True)  # the worker's waiter got the slot the raise freed
        assert registry.get_sample_value("duro_limit_keys_full", {"limit": "partner-api"}) == 1
        for run in runs:
            await run.signal("done")
        for run in runs:
            assert (await run.result(timeout="10s")).startswith("account:a")


async def _client_sees_the_keys(client: Engine) -> None:
    import httpx

    from duro_devserver.app import create_app
    from duro_devserver.source import FixedEngine

    (info,) = [i for i in await client.limits.list() if i.name == "partner-api"]
    assert info.per_key == 2
    app = create_app(FixedEngine(client, run_worker=False))
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8787") as http:
            keys = (await http.get("/api/limits/partner-api/keys")).json()
            assert [(k["key"], k["busy"], k["waiting"]) for k in keys["keys"]] == [("account:a", 2, 1)]
            assert keys["limit"]["per_key"] == 2
            one = (await http.get("/api/limits/partner-api/slots", params={"key": "account:a"})).json()
            assert sorted(s["run_id"] for s in one["slots"]) == ["a1", "a2", "a3"]
            path = "/api/limits/partner-api/keys/account:a/capacity"
            refused = await http.put(path, json={"capacity": "3"})
            assert refused.status_code == 422 and "JSON integer" in refused.json()["message"]
            assert (await http.get("/api/limits/plain/keys")).status_code == 400
            raised = await http.put(path, json={"capacity": 3})
            assert raised.status_code == 200 and raised.json()["key"]["overridden"] is True


def test_a_requeued_reservation_does_not_pass_an_older_waiter_deep_in_the_queue(database_url):
    """More waiters of a full key than the store reads at once (a page of 500), then a waiter of a
    key with room; a reservation of a third key lapses and goes back last. The freed slot goes to
    the older waiter with room, however deep in the queue, not to the requeued one."""
    from duro.definitions._config import LimitConfig
    from duro.rules._slots import RESERVATION_MS
    from duro.store import ReleaseSlot, RequestSlot, SqlStore

    store = SqlStore(database_url, decisions_clock="caller")
    store.create_schema()
    config = LimitConfig("deep", capacity=2, max_hold_ms=3_600_000, per_key=1)
    try:

        def request(slot_id: str, key: str, now: int):
            return store.steps.apply(RequestSlot(config, slot_id, None, None, None, now, None, key)).row

        assert request("held-k0", "k0", 1).state == "busy"
        assert request("held-k2", "k2", 2).state == "busy"
        for i in range(600):
            request(f"w-k0-{i:03d}", "k0", 10 + i)  # k0 is full: they wait
        assert request("w-k2", "k2", 700).state == "waiting"
        assert request("w-k1", "k1", 701).state == "waiting"  # the limit is full
        released = store.steps.apply(ReleaseSlot({"deep": config}, "held-k2", 800))
        assert [row.id for row in released.granted] == ["w-k2"]  # reserved: k2 has room again
        assert store.slots.get("w-k2").state == "reserved"
        changed, granted = store.slots.expire({"deep": config}, 800 + RESERVATION_MS + 1)
        assert [row.id for row in granted] == ["w-k1"], [row.id for row in granted]
        assert store.slots.get("w-k2").state == "waiting"  # back in the queue, last
    finally:
        store.close()


@workflow(name="keyed.switch")
async def switch(job: dict) -> str:
    """Holds a slot of limit "switch" (of its account's key when the job names one) until ``done``."""
    key = f"account:{job['account']}" if job.get("account") else None
    async with limit_slot("switch", key=key, label=job["id"]) as slot:
        await wait_for_signal("done")
    return f"{slot.key} {slot.label}"


def _switch_engine(url: str, capacity: int, per_key: int | None) -> Engine:
    """A worker whose duro.config.py declares "switch" so (each one a deploy of a changed config)."""
    limit = Limit(capacity=capacity, per_key=per_key, max_hold="1h")
    engine = Engine(url, workspace=define_workspace(limits={"switch": limit}))
    engine.register(switch)
    return engine


async def _states(engine: Engine) -> dict[str | None, str]:
    return {s.run_id: s.state for s in await engine.limits.slots("switch")}


async def _holds(engine: Engine, *run_ids: str) -> None:

    async def held() -> bool:
        states = await _states(engine)
        return all(states.get(run_id) in ("busy", "reserved") for run_id in run_ids)

    await eventually(held, what=f"{run_ids} holding their slots")


async def test_per_key_raised_then_removed_in_the_config_keeps_every_run(database_url):
    """per_key 1 -> 2: the key's waiter is granted by the new worker's pass; -> no per_key: the limit
    is plain, the runs that asked with a key go on and a freed slot goes to the oldest waiter."""
    first = _switch_engine(database_url, capacity=3, per_key=1)
    async with first:
        for run_id, account in (("a1", "a"), ("a2", "a"), ("b1", "b")):  # one at a time: in this order
            await first.start("keyed.switch", {"id": run_id, "account": account}, run_id=run_id)
            await eventually(lambda r=run_id: _has(first, r), what=f"{run_id}'s request")
        await _holds(first, "a1", "b1")
        assert (await _states(first))["a2"] == "waiting"  # its key is full, the limit is not
    raised = _switch_engine(database_url, capacity=3, per_key=2)
    async with raised:
        await _holds(raised, "a1", "a2", "b1")
        keys = await raised.limits.keys("switch")
        assert [(k.key, k.capacity, k.busy + k.reserved) for k in keys] == [
            ("account:a", 2, 2),
            ("account:b", 2, 1),
        ]
        await raised.start("keyed.switch", {"id": "c1", "account": "c"}, run_id="c1")
        await eventually(lambda: _has(raised, "c1"), what="c1's request")
        assert (await _states(raised))["c1"] == "waiting"  # the limit is full
    plain = _switch_engine(database_url, capacity=3, per_key=None)
    async with plain:
        handle = plain.handle("a1")
        await handle.signal("done")
        assert await handle.result(timeout="10s") == "account:a a1"
        await _holds(plain, "a2", "b1", "c1")
        with pytest.raises(DuroError, match="limit 'switch' has no keys"):
            await plain.limits.keys("switch")
        for run_id in ("a2", "b1", "c1"):
            await plain.handle(run_id).signal("done")
        results = [await plain.handle(r).result(timeout="10s") for r in ("a2", "b1", "c1")]
        assert results == ["account:a a2", "account:b b1", "account:c c1"]


async def test_a_plain_limit_made_keyed_hands_its_keyless_waiters_on(database_url):
    """Runs that waited without a key when the limit became keyed are granted in their turn (a key
    never holds them up), and keyed runs queue behind them as their keys allow."""
    first = _switch_engine(database_url, capacity=1, per_key=None)
    async with first:
        for run_id in ("x1", "x2"):
            await first.start("keyed.switch", {"id": run_id}, run_id=run_id)
            await eventually(lambda r=run_id: _has(first, r), what=f"{run_id}'s request")
        await _holds(first, "x1")
        assert (await _states(first))["x2"] == "waiting"
    keyed = _switch_engine(database_url, capacity=1, per_key=1)
    async with keyed:
        await keyed.start("keyed.switch", {"id": "y1", "account": "a"}, run_id="y1")
        await eventually(lambda: _has(keyed, "y1"), what="y1's request")
        keys = await keyed.limits.keys("switch")  # the keyless slots are no key's
        assert [(k.key, k.busy, k.waiting) for k in keys] == [("account:a", 0, 1)]
        await keyed.handle("x1").signal("done")
        await _holds(keyed, "x2")
        await keyed.handle("x2").signal("done")
        await _holds(keyed, "y1")
        await keyed.handle("y1").signal("done")
        results = [await keyed.handle(r).result(timeout="10s") for r in ("x1", "x2", "y1")]
        assert results == ["None x1", "None x2", "account:a y1"]


async def _has(engine: Engine, run_id: str) -> bool:
    return run_id in await _states(engine)
