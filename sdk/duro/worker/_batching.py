"""Group commit: progress writes of many runs made in the same turn of the event loop share one
transaction.

A run's write (record a step, finish the run; on SQLite also request or release a slot) waits for
its transaction to commit before the run goes on, exactly as a write of its own would; only the
commit is shared. Each write keeps its own fence (owner, unfinished status) and its own result, so
one run losing its ownership never affects another's write. On a failure of the shared transaction,
each write is retried alone. The only run in flight on an inline store (the harness) writes at once: there is
nobody to share with, and a batch would cost it loop turns.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from ..store import Command

if TYPE_CHECKING:
    from ..store import SqlStore

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
