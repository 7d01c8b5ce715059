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
    MARK,
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
)

if TYPE_CHECKING:
    from ..store import SqlStore
from collections.abc import Awaitable
from typing import TYPE_CHECKING

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
        self._bulk_executor: ThreadPoolExecutor | None = (
            None  # SQLite's long grant passes (see _executor_for)
        )
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
        marked = getattr(fn, MARK, None)  # "read", "bulk" or None (a write): see store.reads
        if self._now_or_never is not None and marked != "bulk":
            try:
                return self._now_or_never(fn, *args)
            except WouldWait:
                pass
        return await self.call_on(self._executor_for(marked), fn, *args)

    def _executor_for(self, marked: str | None) -> ThreadPoolExecutor:
        """The threads for a store method marked ``marked``. On SQLite a bulk call (granting many
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


# -- the group commit ------------------------------------------------------------------------------
# Group commit: progress writes of many runs made in the same turn of the event loop share one
# transaction.
#
# A run's write (record a step, finish the run; on SQLite also request or release a slot) waits for
# its transaction to commit before the run goes on, exactly as a write of its own would; only the
# commit is shared. Each write keeps its own fence (owner, unfinished status) and its own result, so
# one run losing its ownership never affects another's write. On a failure of the shared transaction,
# each write is retried alone. The only run in flight on an inline store (the harness) writes at once: there is
# nobody to share with, and a batch would cost it loop turns.

# told of a write that did not take: its result (``False``: fenced) or the exception it raised
Refused = Callable[[Any], None]


class Pending:
    """A write its caller goes on without awaiting (``GroupCommit.write_nowait``). Its outcome is
    set when the write commits, synchronously: no future and no loop callback on the hot path. The
    caller asks for it later (``outcome()``, which waits only if it has not committed yet), and
    ``on_refused`` hears at once of a write that did not take."""

    __slots__ = ("done", "result", "error", "_on_refused", "_waiter")

    def __init__(self, on_refused: Refused | None) -> None:
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None
        self._on_refused = on_refused
        self._waiter: asyncio.Future[None] | None = None

    @property
    def took(self) -> bool:
        """Committed and not refused (so far as is known now)."""
        return self.done and self.error is None and self.result is True

    async def outcome(self) -> Any:
        """The write's result once it has committed; its exception if it failed."""
        if not self.done:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        if self.error is not None:
            raise self.error
        return self.result

    def settle(self, result: Any, error: BaseException | None) -> None:
        self.done, self.result, self.error = True, result, error
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)
        if self._on_refused is not None and (error is not None or result is not True):
            self._on_refused(error if error is not None else result)

    def cancel(self) -> None:
        """The write was dropped (the engine abandoned): whoever waits for it stops waiting."""
        if self._waiter is not None:
            self._waiter.cancel()


# where a write's outcome goes: the future its writer awaits, a nowait write's Pending, or the
# ``on_refused`` of an untracked one
Sink = asyncio.Future[Any] | Pending | Refused


class GroupCommit:
    """Queues the commands of the runs' writes and applies those the store batches
    (``SqlStore.batches``) together, one transaction per loop turn; the others alone."""

    def __init__(
        self,
        store: SqlStore,
        call: Callable[..., Awaitable[Any]],
        max_batch: int = 500,
        alone: Callable[[], bool] = lambda: False,
    ) -> None:
        self._store = store
        self._call = call  # how the store is called (off the event loop; inline under the harness)
        self._max_batch = max_batch
        # each command with where its outcome goes
        self._pending: list[tuple[Command, Sink]] = []
        self._detached: set[asyncio.Task[None]] = set()  # nowait writes made alone
        self._flushing: asyncio.Task[None] | None = None
        self._batched = store.batches
        # whether the writer is the only run in flight here: nobody to share a commit with, so a
        # write with nothing queued before it is made at once, without the loop turns of a batch
        self._alone = alone

    def write(self, command: Command) -> Awaitable[Any]:
        """The command's result, once committed."""
        if type(command) not in self._batched or (self._flushing is None and self._alone()):
            return self._call(self._store.steps.apply, command)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((command, future))
        if self._flushing is None:
            self._flushing = loop.create_task(self._flush())
        return future

    def write_nowait(self, command: Command, on_refused: Refused | None = None) -> Pending:
        """Queue a write the caller does not wait for now: only where nothing the caller does next
        depends on it (a sleep's record, which commits while the run sleeps; a sleep's end). The
        returned :class:`Pending` tells its outcome; ``on_refused`` hears of a write that did not
        take (its result when that is not ``True``, or the exception it raised)."""
        pending = Pending(on_refused)
        if type(command) not in self._batched:
            task = asyncio.get_running_loop().create_task(self._one(command, pending))
            self._detached.add(task)
            task.add_done_callback(self._detached.discard)
            return pending
        self._pending.append((command, pending))
        if self._flushing is None:
            self._flushing = asyncio.get_running_loop().create_task(self._flush())
        return pending

    def write_untracked(self, command: Command, on_refused: Refused) -> None:
        """``write_nowait`` for a write whose outcome nobody asks for later (a sleep's end): only
        ``on_refused`` hears of it, and only if it did not take."""
        if type(command) not in self._batched:
            self.write_nowait(command, on_refused)
            return
        self._pending.append((command, on_refused))
        if self._flushing is None:
            self._flushing = asyncio.get_running_loop().create_task(self._flush())

    def abandon(self) -> None:
        """Drop writes not yet committed, as a process that dies here would."""
        if self._flushing is not None:
            self._flushing.cancel()
            self._flushing = None
        for _, sink in self._pending:
            if not callable(sink):
                sink.cancel()
        self._pending = []

    async def _flush(self) -> None:
        try:
            await asyncio.sleep(0)  # let every run that is ready this turn queue its write
            while self._pending:
                batch, self._pending = self._pending[: self._max_batch], self._pending[self._max_batch :]
                try:
                    results = await self._call(
                        self._store.steps.apply_batch, [command for command, _ in batch]
                    )
                except Exception:  # noqa: BLE001 - retry each write alone so one bad write fails alone
                    for command, sink in batch:
                        await self._one(command, sink)
                    continue
                for (_, sink), result in zip(batch, results, strict=True):
                    _tell(sink, result, None)
        finally:
            self._flushing = None

    async def _one(self, command: Command, sink: Sink) -> None:
        try:
            result = await self._call(self._store.steps.apply, command)
        except Exception as err:  # noqa: BLE001
            _tell(sink, None, err)
        else:
            _tell(sink, result, None)


def _tell(sink: Sink, result: Any, error: BaseException | None) -> None:
    """A write's outcome to its writer's future (unless the writer gave up waiting), to the Pending
    of a write nobody awaits now, or to an untracked write's ``on_refused`` if it did not take."""
    if isinstance(sink, Pending):
        sink.settle(result, error)
    elif callable(sink):
        if error is not None or result is not True:
            sink(error if error is not None else result)
    elif not sink.done():
        if error is not None:
            sink.set_exception(error)
        else:
            sink.set_result(result)
