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
from typing import Any

# where a write's outcome goes: the future its writer awaits
Sink = asyncio.Future[Any]


class GroupCommit:
    def __init__(self, store: Any, call: Callable[..., Awaitable[Any]], max_batch: int = 500,
                 alone: Callable[[], bool] = lambda: False) -> None:
        self._store = store
        self._call = call  # the engine's way to call the store (in a thread; inline under the harness)
        self._max_batch = max_batch
        # each write with the future its writer awaits
        self._pending: list[tuple[str, tuple[Any, ...], Sink]] = []
        self._flushing: asyncio.Task[None] | None = None
        # the methods its apply_batch takes (record_step and finish_run unless the store says more)
        self._batched = frozenset(getattr(store, "batched", ("record_step", "finish_run"))
                                  if hasattr(store, "apply_batch") else ())
        # whether the writer is the only run in flight here: nobody to share a commit with, so a
        # write with nothing queued before it is made at once, without the loop turns of a batch
        self._alone = alone

    def write(self, method: str, *args: Any) -> Awaitable[Any]:
        """The write's result, once committed. A plain function returning the future: a run awaits
        it directly, one frame less to suspend and resume on every write."""
        if method not in self._batched or (self._flushing is None and self._alone()):
            return self._call(getattr(self._store, method), *args)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending.append((method, args, future))
        if self._flushing is None:
            self._flushing = loop.create_task(self._flush())
        return future

    def abandon(self) -> None:
        """Drop writes not yet committed, as a process that dies here would."""
        if self._flushing is not None:
            self._flushing.cancel()
            self._flushing = None
        for _, _, sink in self._pending:
            sink.cancel()
        self._pending = []

    async def _flush(self) -> None:
        try:
            await asyncio.sleep(0)  # let every run that is ready this turn queue its write
            while self._pending:
                batch, self._pending = self._pending[:self._max_batch], self._pending[self._max_batch:]
                try:
                    results = await self._call(self._store.apply_batch, [(m, a) for m, a, _ in batch])
                except Exception:  # noqa: BLE001 - retry each write alone so one bad write fails alone
                    for method, args, future in batch:
                        await self._one(method, args, future)
                    continue
                for (_, _, sink), result in zip(batch, results, strict=True):
                    _tell(sink, result, None)
        finally:
            self._flushing = None

    async def _one(self, method: str, args: tuple[Any, ...], sink: Sink) -> None:
        try:
            result = await self._call(getattr(self._store, method), *args)
        except Exception as err:  # noqa: BLE001
            _tell(sink, None, err)
        else:
            _tell(sink, result, None)


def _tell(sink: Sink, result: Any, error: BaseException | None) -> None:
    """A write's outcome to its writer's future (unless the writer gave up waiting)."""
    if not sink.done():
        if error is not None:
            sink.set_exception(error)
        else:
            sink.set_result(result)
