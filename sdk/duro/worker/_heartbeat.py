"""A worker's heartbeat: the lease on every run it owns, and its watch over the other workers.

The lease is good until the moment the last successful heartbeat was *sent*, plus the lease (see
:mod:`._lease`). Past it, no code of any run executes until a heartbeat goes through again
(:meth:`Heartbeat.confirm`, which every run calls through ``RunContext.resume``). A heartbeat that
finds the worker's row gone (a claim took its runs over) drops every run the worker holds and joins again.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any

from .._clock import Clock
from ..rules._lease import OwnLease, Watch
from ._gateway import StoreGateway, store_trouble

log = logging.getLogger("duro")


def _process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Heartbeat:
    def __init__(
        self,
        *,
        worker_id: str,
        namespace: str,
        host: str,
        lease_ms: int,
        clock: Clock,
        gateway: StoreGateway,
        drop_all: Callable[[], int],
        rejoined: Callable[[], None],
    ) -> None:
        self.worker_id = worker_id
        self._namespace = namespace
        self._host = host
        self.lease_ms = lease_ms
        self._clock = clock
        self._gateway = gateway
        self._drop_all = drop_all  # stop every run the worker holds; how many there were
        self._rejoined = rejoined  # the worker joined again: look for runs to claim
        self.lease = OwnLease(lease_ms)  # until when our runs are ours without asking the store
        self.watch = Watch(lease_ms, beat_every_ms=lease_ms // 3)  # the other workers' heartbeats
        self._monotonic = clock.monotonic_ms
        self.last_sent = 0  # the clock's time of the last heartbeat that went through
        self.running = False
        self._beating: asyncio.Future[None] | None = None  # the heartbeat in flight, if any
        self._executor: ThreadPoolExecutor | None = None  # the heartbeat's own thread
        self._task: asyncio.Task[None] | None = None

    async def join(self) -> None:
        """Register the worker's row: its lease starts now."""
        sent, now = self._monotonic(), self._clock.now_ms()
        store = self._gateway.store
        await self._gateway.call(
            store.workers.register, self.worker_id, self._namespace, self._host, os.getpid(), now
        )
        self.lease.renewed(sent)
        self.last_sent = now
        self.running = True

    def start(self) -> None:
        """Beat every third of the lease in a thread of its own (not under the harness, whose clock
        and store are driven by the test: the worker's pass beats there)."""
        if self._gateway.threaded:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="duro-heartbeat")
            self._task = asyncio.get_running_loop().create_task(
                self._loop(), name=f"duro-heartbeat-{self.worker_id}"
            )

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    async def stop(self) -> None:
        """Stop beating; a beat in flight finishes and gives its connection back first."""
        self.running = False
        beating, self._beating = self._beating, None
        if beating is not None:
            beating.cancel()
        executor, self._executor = self._executor, None
        if executor is not None:
            await asyncio.get_running_loop().run_in_executor(None, executor.shutdown)

    def owns_runs(self) -> bool:
        """Whether our lease is good now: no other worker can have taken our runs."""
        good_until = self.lease.good_until  # Lease.valid, written out: every run asks at every resume
        return good_until is not None and self._monotonic() < good_until

    async def confirm(self) -> None:
        """Wait until our lease is good again: a heartbeat went through (our row was there: nobody
        took our runs), or our row was gone, every run we held was dropped and we joined again.
        A store out of reach keeps us waiting here: no code of any run executes meanwhile."""
        pause = 0.05
        while self.running and not self.owns_runs():
            try:
                await self.beat()
            except Exception as err:  # noqa: BLE001 - the store out of reach: again, until it answers
                store_trouble("confirming the lease", err)
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)

    async def beat(self) -> None:
        """One heartbeat, shared by whoever asks while it is in flight (the heartbeat loop, runs
        waiting to confirm the lease, the claim pass)."""
        beating = self._beating
        if beating is None or beating.done():  # a finished beat's callback may not have run yet:
            # awaiting it again would return at once, and a confirm loop would spin on it forever
            if not self._gateway.threaded:  # inline (the harness): no task, no loop turn
                await self._beat()
                return
            beating = self._beating = asyncio.ensure_future(self._beat())
            beating.add_done_callback(self._beat_done)
        await asyncio.shield(beating)

    def _beat_done(self, beating: asyncio.Future[None]) -> None:
        if self._beating is beating:
            self._beating = None
        if not beating.cancelled():
            beating.exception()  # retrieved: whoever awaited it was told

    async def _beat(self) -> None:
        call: Callable[..., Awaitable[Any]]
        if self._executor is not None:
            call = partial(self._gateway.call_on, self._executor)
        else:
            call = self._gateway.call
        store = self._gateway.store
        sent, now = self._monotonic(), self._clock.now_ms()
        try:
            stamps = await call(store.workers.heartbeat, self.worker_id, now)
        except BaseException:
            self.watch.missed()
            raise
        self.last_sent = now
        if stamps is not None:
            self.lease.renewed(sent)
            self.watch.beat(sent, self._monotonic(), stamps, self.worker_id)
            return
        # Our row was gone: a claim took our runs over (we were frozen, or cut off from the store, longer
        # than the lease) and may have taken any of our runs. Drop them all and join again: what
        # nobody took is handed back by the registration and claimed again, from the store.
        self.lease.lapse()
        self.watch.missed()
        dropped = self._drop_all()
        log.warning(
            "duro worker %s: found its lease taken over; dropped %d in-flight runs and joined again",
            self.worker_id,
            dropped,
        )
        sent = self._monotonic()
        await call(store.workers.register, self.worker_id, self._namespace, self._host, os.getpid(), now)
        self.lease.renewed(sent)
        self._rejoined()

    async def _loop(self) -> None:
        """Keep the lease, every third of it, in a thread of its own: store calls blocked behind
        another process's transaction (one frozen while it holds a limit's lock, say) can occupy
        every store thread, and a worker that waits is alive, so its runs must stay its own."""
        while True:
            now = self._clock.now_ms()
            try:
                await self.beat()
            except Exception as err:  # noqa: BLE001 - the store out of reach for a moment: the next beat
                store_trouble("the heartbeat", err)
            await self._clock.sleep_until(now + self.lease_ms // 3)

    async def reap_local_dead(self) -> None:
        """Remove the rows of workers of this host whose process is gone (their runs go back at once,
        without waiting a lease for them)."""
        gateway = self._gateway
        dead = [
            wid
            for wid, pid in await gateway.call(gateway.store.workers.local, self._host)
            if wid != self.worker_id and not _process_alive(pid)
        ]
        for worker_id in dead:
            await gateway.call(gateway.store.workers.remove, worker_id, self._clock.now_ms(), True)
