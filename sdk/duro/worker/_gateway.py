"""The store gateway: how every part of an engine calls the store without the event loop ever
waiting on the database.

On SQLite a call is first made on the loop *without waiting* (busy timeout 0, this process's write
lock taken without blocking): microseconds, less than a thread hop. A call that would wait raises
``WouldWait`` having changed nothing, and is made in a thread instead: one writer thread (writes go
one at a time anyway) and four reader threads (WAL never blocks a read, so a locked file never holds
one up). On PostgreSQL every call runs in a pool of eight threads. Only the harness calls inline,
waiting included (``EngineHooks.inline_store``). A transient error (the database restarting or
failing over) is retried for 30 s; a store still out of reach then raises ``StoreUnavailable``.

A run's progress writes go through :attr:`StoreGateway.progress`, the group commit.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sized
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .._errors import StoreUnavailable
from .._hooks import EngineHooks
from ..store import (
    Command,
    ConfirmSlot,
    FinishRun,
    GiveUpSlot,
    RecordStep,
    ReleaseSlot,
    RequestSlot,
    SendSignal,
    SlotOutcome,
    StepRecord,
    TakeSignal,
    WouldWait,
    store_call,
)
from ._batching import GroupCommit

if TYPE_CHECKING:
    from ..store import SqlStore

T = TypeVar("T")
log = logging.getLogger("duro")
STORE_RETRY_S = 30.0  # how long a store call is made again while the database restarts or fails over


class StoreGateway:
    def __init__(self, store: SqlStore, hooks: EngineHooks, live: Sized = ()) -> None:
        self.store = store
        self._hooks = hooks
        # SQLite's calls are tried on the loop first, never waiting for a lock (see call)
        self._now_or_never = store.db.without_waiting if store.dialect == "sqlite" else None
        self._db_executor: ThreadPoolExecutor | None = None  # every call (PostgreSQL), or the writes (SQLite)
        self._read_executor: ThreadPoolExecutor | None = None  # SQLite's reads: never behind a locked write
        self._bulk_executor: ThreadPoolExecutor | None = None  # SQLite's long hand-outs (see _executor_for)
        self._live = live  # the runs in flight here (see _one_run_in_flight)
        self.progress = self._group_commit()

    def _group_commit(self) -> GroupCommit:
        return GroupCommit(self.store, self.call, alone=self._one_run_in_flight)

    def _one_run_in_flight(self) -> bool:
        """Whether a progress write may skip the group commit: the only run in flight here, on a
        store called on the loop (SQLite; PostgreSQL's batch pipelines a write's statements: one
        round trip, not two)."""
        return (self._hooks.inline_store or self._now_or_never is not None) and len(self._live) <= 1

    @overload
    async def apply(self, command: RecordStep | FinishRun | SendSignal) -> bool: ...
    @overload
    async def apply(self, command: TakeSignal) -> StepRecord | None: ...
    @overload
    async def apply(self, command: RequestSlot | ConfirmSlot | GiveUpSlot | ReleaseSlot) -> SlotOutcome: ...
    async def apply(self, command: Command) -> bool | StepRecord | SlotOutcome | None:
        """``store.steps.apply(command)`` through :meth:`call`, typed by the command."""
        return await self.call(self.store.steps.apply, command)

    @property
    def threaded(self) -> bool:
        """Whether store calls run in threads (always, except under the harness)."""
        return not self._hooks.inline_store

    async def call(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``, a method of the store, without the event loop waiting on the database."""
        if self._hooks.inline_store:
            return fn(*args)
        if self._now_or_never is not None and store_call(fn) != "bulk":
            try:
                return self._now_or_never(fn, *args)
            except WouldWait:
                pass
        return await self.call_on(self._executor_for(fn), fn, *args)

    def _executor_for(self, fn: Callable[..., Any]) -> ThreadPoolExecutor:
        """The threads for the store method ``fn``. On SQLite a bulk call (a hand-out of many
        slots, in transactions of 1,000 grants) has a thread of its own, never the event loop: the
        writer thread stays free for the runs' writes, which take their turns with its transactions
        (see ``store._connection.TurnLock``)."""
        if self._db_executor is None:
            sqlite = self.store.dialect == "sqlite"
            self._db_executor = ThreadPoolExecutor(
                max_workers=1 if sqlite else 8, thread_name_prefix="duro-db"
            )
            if sqlite:
                self._read_executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="duro-db-read")
                self._bulk_executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="duro-db-bulk")
        marked = store_call(fn)
        if self._bulk_executor is not None and marked == "bulk":
            return self._bulk_executor
        if self._read_executor is not None and marked == "read":
            return self._read_executor
        return self._db_executor

    async def call_on(self, executor: ThreadPoolExecutor, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in ``executor``'s threads, again while the error is transient (30 s). A
        store still out of reach then raises :class:`StoreUnavailable` (the dev server's 503)."""
        loop = asyncio.get_running_loop()
        store = self.store
        give_up, pause = loop.time() + STORE_RETRY_S, 0.05
        while True:
            try:
                return await loop.run_in_executor(executor, partial(fn, *args))
            except Exception as err:
                if not store.is_transient(err) or loop.time() > give_up:
                    if store.is_unavailable(err):
                        raise StoreUnavailable(
                            f"the database at {store.safe_url} is busy or out of reach "
                            f"({type(err).__name__}); nothing was changed: try again in a few seconds"
                        ) from err
                    raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)

    def abandon(self) -> None:
        """Drop the progress writes not yet committed, as a process that dies here would."""
        self.progress.abandon()
        self.progress = self._group_commit()

    def close(self) -> None:
        """Release the store's pooled connections and threads; a later call opens them again."""
        for executor in (self._db_executor, self._read_executor, self._bulk_executor):
            if executor is not None:
                executor.shutdown(wait=True)
        self._db_executor = self._read_executor = self._bulk_executor = None
        self.store.close()


def store_trouble(where: str, err: Exception) -> None:
    """A background pass failed (the database restarting, say); it runs again. The log line names
    the error's type and the driver's first line only: SQL parameters (labels, payloads) stay out."""
    cause = getattr(err, "orig", None) or err
    first = (str(cause).strip().splitlines() or [""])[0][:200]
    log.warning("duro worker: %s failed (%s: %s); trying again", where, type(cause).__name__, first)
