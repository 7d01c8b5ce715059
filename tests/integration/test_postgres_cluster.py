"""Several workers on one PostgreSQL: wakeups across processes through LISTEN/NOTIFY, and
decisions judged by the database server's clock whatever the workers' clocks say."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import psycopg
import pytest

from duro import (
    Engine,
    Limit,
    WorkerOptions,
    acquire_slot,
    define_workspace,
    release_slot,
    wait_for_signal,
    workflow,
)
from duro.store import SqlStore
from duro.store._notify import RunNotice, read
from tests.support.pgserver import dsn
from tests.support.waiting import eventually

pytestmark = pytest.mark.postgres

WORKSPACE = define_workspace(limits={"line": Limit(capacity=1, max_hold="2s")})


@workflow(name="holder")
async def holder(tag: str) -> str:
    slot = await acquire_slot("line", label=tag, timeout="1m")
    await wait_for_signal("go")
    await release_slot(slot.id)
    return tag


@workflow(name="waiter")
async def waiter(tag: str) -> str:
    slot = await acquire_slot("line", label=tag, timeout="1m")
    await release_slot(slot.id)
    return tag


class SkewedClock:
    """A worker whose clock runs ``offset_ms`` away from everyone else's."""

    def __init__(self, offset_ms: int) -> None:
        from duro._clock import SystemClock

        self._system = SystemClock()
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return self._system.now_ms() + self.offset_ms

    def sleep_until(self, due_ms: int):  # type: ignore[no-untyped-def]
        return self._system.sleep_until(due_ms - self.offset_ms)

    def monotonic_ms(self) -> int:
        return self._system.monotonic_ms()


def engine(url: str, **kwargs: Any) -> Engine:
    options = {key: kwargs.pop(key) for key in ("poll_interval", "lease", "worker_id") if key in kwargs}
    options.setdefault("poll_interval", "30s")  # polls too slow to matter, unless a test says otherwise
    created = Engine(url, workspace=WORKSPACE, options=WorkerOptions(**options), **kwargs)
    created.register(holder)
    created.register(waiter)
    return created


async def test_a_release_in_one_worker_wakes_the_waiter_in_another_at_once(postgres_url):
    async with engine(postgres_url, worker_id="a") as a, engine(postgres_url, worker_id="b") as b:
        held = await a.start("holder", "first")
        await eventually(lambda: _busy(a), 10, "the first run to hold the slot")
        queued = await b.start("waiter", "second")
        await eventually(lambda: _waiting(b), 10, "the second run to queue")
        await a.signal(held.id, "go")  # a's run releases; b's waiter must not wait for a 30 s poll
        assert await queued.result(timeout="10s") == "second"


async def test_a_run_started_by_a_client_is_claimed_without_waiting_for_the_poll(postgres_url):
    async with engine(postgres_url, worker_id="worker") as worker:
        client = engine(postgres_url)  # never entered: it only starts runs
        try:
            run = await client.start("waiter", "from a client")
            assert await run.result(timeout="10s") == "from a client"
            assert (await worker.get_run(run.id)).status == "completed"
        finally:
            client.close()


async def test_a_claim_wakeup_claims_only_and_the_full_pass_looks_at_everything_else(postgres_url):
    """A start announced by another process wakes the worker for a claim only: it does not read the
    statuses of the runs in flight (a third of a worker's CPU when every start woke every worker
    for a full pass). The poll pass still reads them, as the fallback for lost notifications."""
    async with engine(postgres_url, worker_id="worker", poll_interval="1h") as worker:
        loop = worker.worker
        assert loop is not None
        held = await worker.start("holder", "in flight")  # stays live: idle on its signal
        await eventually(lambda: _busy(worker), 10, "the run to hold the slot")
        await eventually(lambda: loop.full_passes >= 1, 10, "the worker's first pass to end")
        store, reads = worker.store, []
        statuses = store.runs.statuses

        def counted(ids):  # type: ignore[no-untyped-def]
            reads.append(sorted(ids))
            return statuses(ids)

        store.runs.statuses = counted  # type: ignore[method-assign]
        client = engine(postgres_url)  # never entered: it only starts runs
        try:
            run = await client.start("waiter", "from a client")
            await eventually(lambda: run.id in loop.live, 10, "the announced run to be claimed")
            assert reads == [] and loop.full_passes == 1
            loop._statuses_read = -(10**12)  # they are read twice a second at most: not for the last half
            await loop.tick()  # what the poll pass does
            assert reads == [sorted(loop.live)]
            await worker.signal(held.id, "go")
            assert await run.result(timeout="10s") == "from a client"
        finally:
            client.close()
            store.runs.statuses = statuses  # type: ignore[method-assign]


async def test_a_worker_whose_clock_runs_ahead_takes_no_slot_back_early(postgres_url):
    async with engine(postgres_url, worker_id="honest") as honest:
        held = await honest.start("holder", "held")
        await eventually(lambda: _busy(honest), 10, "the slot to be held")
        ahead = engine(postgres_url, worker_id="ahead", clock=SkewedClock(10 * 60_000))
        async with ahead:
            await ahead.worker.tick()  # type: ignore[union-attr]
            changed, granted = await asyncio.to_thread(
                ahead.store.slots.expire, ahead.workspace.limits, ahead.clock.now_ms()
            )
            assert changed == [] and granted == []  # 10 minutes "later" on its clock: not on the database's
            (slot,) = await honest.limits.slots("line")
            assert slot.state == "busy" and slot.run_id == held.id
        await honest.signal(held.id, "go")
        assert await held.result(timeout="10s") == "held"


async def test_a_worker_whose_clock_runs_ahead_steals_no_lease(postgres_url):
    """Leases are judged by heartbeats seen to stop, never by comparing clocks: a claimer an hour
    ahead takes nothing from a live owner, and expiring it on a stamp it has since moved past
    (it beat in between) deletes nothing and takes nothing."""
    store = SqlStore(postgres_url)
    store.create_schema()
    now = await asyncio.to_thread(_db_now, postgres_url)
    store.workers.register(
        "slow-clock", "default", "elsewhere", 1, now - 3_600_000
    )  # stamped by the database
    from duro.store import Claim, NewRun

    store.runs.insert(
        NewRun(
            id="r",
            namespace="default",
            workflow="waiter",
            version="1",
            input='"x"',
            owner="slow-clock",
            created_at=now,
        ),
        None,
    )
    far_ahead = now + 3_600_000  # a claimer an hour ahead thinks the owner's heartbeat is an hour old
    assert (
        store.runs.claim(
            Claim(worker_id="fast-clock", namespace="default", workflows=["waiter"], now=far_ahead)
        )
        == []
    )
    seen = store.workers.heartbeat("slow-clock", now)["slow-clock"]
    assert store.workers.heartbeat("slow-clock", now)["slow-clock"] > seen  # every beat moves the stamp on
    assert (
        store.runs.claim(
            Claim(
                worker_id="fast-clock",
                namespace="default",
                workflows=["waiter"],
                now=far_ahead,
                expired=[("slow-clock", seen)],
            )
        )
        == []
    )
    assert (
        store.workers.heartbeat("slow-clock", now) is not None
    )  # still registered: it beat after the stamp seen
    store.close()


@pytest.mark.timeout(60)
async def test_workers_blocked_behind_a_frozen_transaction_keep_their_leases(postgres_url):
    """A process frozen inside a transaction (SIGSTOP, a paused VM) while it holds a limit's lock
    blocks every slot operation until it resumes. The workers blocked behind it are alive: they keep
    their leases, or the first process to resume would take their runs and re-execute their steps."""
    raw = dsn(postgres_url)
    observer, client = SqlStore(postgres_url), engine(postgres_url)  # the client runs no worker
    async with engine(postgres_url, worker_id="blocked", lease="1s") as eng:
        await (await eng.start("waiter", "creates the limit's row")).result(timeout="10s")
        with psycopg.connect(raw) as frozen:
            frozen.execute("SELECT name FROM duro_limits WHERE name = 'line' FOR UPDATE")
            handles = [
                await client.start("waiter", f"w{i}") for i in range(12)
            ]  # more than the store's threads

            def lock_waits() -> int:
                with psycopg.connect(raw, autocommit=True) as conn:
                    return int(
                        conn.execute(
                            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
                        ).fetchone()[0]
                    )

            await eventually(lambda: asyncio.to_thread(lock_waits), 10, "the store's threads blocked")
            loop = asyncio.get_running_loop()
            watched_until, oldest = loop.time() + 3.0, 0  # three leases
            while loop.time() < watched_until:
                (row,) = await asyncio.to_thread(observer.workers.all)
                oldest = max(oldest, row["db_now"] - row["heartbeat_at"])
                await asyncio.sleep(0.05)
            frozen.rollback()
        assert oldest < 1000, f"the heartbeat stopped for {oldest} ms behind the frozen transaction"
        assert [await h.result(timeout="20s") for h in handles] == [f"w{i}" for i in range(12)]
    observer.close()
    client.close()


def test_a_session_frozen_inside_a_transaction_is_ended_by_the_server(postgres_url):
    """The store's sessions carry ``idle_in_transaction_session_timeout``: a process frozen while it
    holds a limit's lock gives the lock back after the timeout, and its next call starts afresh."""
    store = SqlStore(postgres_url, idle_in_transaction_timeout="300ms")
    store.create_schema()
    other = SqlStore(postgres_url)
    db = store.db
    with db.write() as conn:
        db.run_text(
            conn,
            "INSERT INTO duro_limits (name, busy, reserved, waiting, next_pos, updated_at) "
            "VALUES ('line', 0, 0, 0, 0, 0)",
            {},
        )
    lock = "SELECT name FROM duro_limits WHERE name = 'line' FOR UPDATE"
    with pytest.raises(psycopg.Error) as ended:
        with db.write() as frozen:  # a transaction of the store, left waiting for its client
            db.run_text(frozen, lock, {})
            with other.db.write() as waiting:  # blocked behind it until the server ends the frozen one
                other.db.run_text(waiting, "SET LOCAL lock_timeout = '5s'", {})
                other.db.run_text(waiting, lock, {})
            db.run_text(frozen, "SELECT 1", {})
    assert store.is_transient(ended.value)  # the engine makes the same call again
    assert store.workers.all() == []  # the store's next call takes a fresh connection
    store.close()
    other.close()


@pytest.mark.timeout(120)
async def test_a_worker_carries_on_across_a_server_restart():
    """The server restarts under a live worker: every pooled connection is dead. Store calls that
    fail on one are made again on a fresh connection (there is no ping per checkout), the listener
    reconnects, and runs started before and after the restart complete."""
    from tests.support.pgserver import start_server

    server = await asyncio.to_thread(
        start_server, True
    )  # an immediate restart keeps every acknowledged commit
    try:
        url = server.url(server.create_database())
        async with engine(url, worker_id="survivor", poll_interval="200ms") as eng:
            before = [await eng.start("waiter", f"b{i}") for i in range(5)]
            assert [await h.result(timeout="20s") for h in before] == [f"b{i}" for i in range(5)]
            await asyncio.to_thread(server.restart, "immediate")
            after = [await eng.start("waiter", f"a{i}") for i in range(5)]
            assert [await h.result(timeout="20s") for h in after] == [f"a{i}" for i in range(5)]
    finally:
        await asyncio.to_thread(server.destroy)


async def test_a_worker_stops_only_after_its_heartbeat_in_flight_has_finished(postgres_url):
    """The heartbeat's thread gives its connection back before the engine closes the store's pool
    (a connection checked in after that is never closed: a ResourceWarning at some later GC)."""
    eng = engine(postgres_url, worker_id="beating", lease="300ms")
    order: list[str] = []
    in_flight, go_on = threading.Event(), threading.Event()
    beat, close = eng.store.workers.heartbeat, eng.store.close

    def slow_beat(*args: object) -> bool:
        in_flight.set()
        go_on.wait(5)
        result = beat(*args)
        order.append("beat done")
        return result

    def closing() -> None:
        order.append("store closed")
        close()

    eng.store.close = closing  # type: ignore[method-assign]
    async with eng:
        eng.store.workers.heartbeat = slow_beat  # type: ignore[method-assign]
        await asyncio.to_thread(in_flight.wait, 5)
        threading.Timer(0.2, go_on.set).start()
    assert order == ["beat done", "store closed"]


def _db_now(url: str) -> int:
    with psycopg.connect(dsn(url)) as conn:
        return int(
            conn.execute("SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint").fetchone()[0]
        )


def test_listen_delivers_notifications_and_stops(postgres_url):
    store = SqlStore(postgres_url)
    store.create_schema()
    received: list[dict] = []
    stopping = threading.Event()
    thread = threading.Thread(target=store.listen, args=(received.append, stopping))
    thread.start()
    try:
        from duro.store import NewRun

        attempts = iter(range(1_000_000))

        def sent() -> (
            bool
        ):  # the listener may not be listening yet: keep starting new runs until one is heard
            store.runs.insert(
                NewRun(
                    id=f"n{next(attempts)}",
                    namespace="default",
                    workflow="w",
                    version="1",
                    input="null",
                    owner=None,
                    created_at=1,
                ),
                None,
            )
            return {"kind": "run", "namespace": "default"} in received

        asyncio.run(eventually(sent, 10, "a notification"))
    finally:
        stopping.set()
        thread.join(5)
    assert not thread.is_alive()
    store.close()


async def _busy(eng: Engine) -> bool:
    (info,) = await eng.limits.list()
    return info.busy == 1


async def _waiting(eng: Engine) -> bool:
    (info,) = await eng.limits.list()
    return info.waiting == 1


class _Loop:
    """Stands for the event loop the listener thread hands notices to."""

    def __init__(self) -> None:
        self.handed: list[list] = []

    def call_soon_threadsafe(self, callback, message):  # type: ignore[no-untyped-def]
        self.handed.append(message)


async def test_one_run_notice_on_its_way_to_the_loop_stands_for_those_after_it(postgres_url):
    """Every start is announced to every worker: the listener thread hands the loop one "run"
    notice at a time (its claim pass sees the later runs too), drops other namespaces' at once,
    and lets every other kind of notice through."""
    async with engine(postgres_url, worker_id="worker") as worker:
        loop, fake = worker.worker, _Loop()
        assert loop is not None
        for message in (
            ["run", "default"],
            ["run", "default"],
            ["run", "elsewhere"],
            ["done", "r", "completed"],
            ["run", None],
        ):
            loop._deliver(fake, read(message))  # type: ignore[arg-type]
        assert fake.handed == [read(["run", "default"]), read(["done", "r", "completed"])]
        loop._on_notice(RunNotice(kind="run", namespace="default"))  # the loop took it: the next goes through
        loop._deliver(fake, read(["run", "default"]))  # type: ignore[arg-type]
        assert fake.handed[-1] == {"kind": "run", "namespace": "default"} and len(fake.handed) == 3
