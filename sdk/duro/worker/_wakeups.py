"""In-memory wake-ups: what a waiting run (or a client awaiting a result) blocks on, by key.

A notification sets every event of its key: a local decision (a signal sent here, a run ended here)
or another process's change, delivered by the store's notices or found by the worker's poll pass.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable
from typing import Any, Generic, TypeVar

from .._clock import Clock
from ..store import OwnStep, RunRecord, StepRecord

K = TypeVar("K")
R = TypeVar("R")


class Waiters(Generic[K]):
    """Events that in-memory waits block on, by key; a notification sets every event of its key."""

    def __init__(self) -> None:
        self._events: dict[K, set[asyncio.Event]] = defaultdict(set)

    def add(self, key: K) -> asyncio.Event:
        event = asyncio.Event()
        self._events[key].add(event)
        return event

    def drop(self, key: K, event: asyncio.Event) -> None:
        events = self._events.get(key)
        if events is not None:
            events.discard(event)
            if not events:
                del self._events[key]

    def notify(self, key: K) -> None:
        for event in self._events.get(key, ()):
            event.set()

    def keys(self) -> list[K]:
        return list(self._events)

    def __contains__(self, key: K) -> bool:
        return bool(self._events.get(key))

    def __bool__(self) -> bool:
        return bool(self._events)


class QueueWaits(Generic[R]):
    """The runs of this process idle in a queue (a limit's slots, a rate's requests), by request id:
    the events they wait on, their hook steps (for a decision made here to write completed in its
    own transaction) and the rows such a decision delivered with the wake-up; and the event that
    wakes the queue's timing loop (``changed``, which each kind of queue decides)."""

    def __init__(self) -> None:
        self._waiters: Waiters[str] = Waiters()
        self._waiting_here: dict[str, OwnStep] = {}  # the waiters' hook steps, by request id
        self._delivered: dict[str, tuple[R, StepRecord | None]] = {}
        self._changed = asyncio.Event()
        self._deadline: int | None = None  # when the loop wakes next (None: it sleeps idle)

    def wait(self, request_id: str, hook: OwnStep | None = None) -> asyncio.Event:
        """Hold a run idle on its request; ``hook``, its hook step, lets a decision made in this
        process write it completed at once (see ``duro.store.ReleaseSlot`` and ``store.rates``)."""
        event = self._waiters.add(request_id)
        if hook is not None:
            self._waiting_here[request_id] = hook
        self.changed()  # the safety pass runs while anyone waits
        return event

    def drop(self, request_id: str, event: asyncio.Event) -> None:
        self._waiters.drop(request_id, event)
        self._waiting_here.pop(request_id, None)
        self._delivered.pop(request_id, None)

    def delivered(self, request_id: str) -> tuple[R, StepRecord | None] | None:
        """The row a local decision delivered with the last wake-up of the request's waiter (and
        its hook step, if the decision wrote it), once."""
        return self._delivered.pop(request_id, None)

    def waiting(self) -> list[str]:
        """The request ids runs of this process wait on (the poll pass reads their states)."""
        return self._waiters.keys()

    def changed(self, due: int | None = None) -> None:
        """A request became active or changed: wake the loop if it must look sooner."""
        raise NotImplementedError

    def look_again(self) -> None:
        """Wake the loop now (a change elsewhere, a reconnection)."""
        self._changed.set()


class Wakeups:
    """The runs idle on a signal, and whoever waits for a run to end, in this process."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.signals: Waiters[tuple[str, str]] = Waiters()  # (run id, signal name)
        self.done: Waiters[str] = Waiters()  # run id
        # the runs ended here as their end was written, for whoever waits for them in this process
        # (kept while someone waits: see Runs.result)
        self.ended: dict[str, RunRecord] = {}

    def wait_end(self, run_id: str) -> asyncio.Event:
        """An event set when ``run_id`` ends here or elsewhere (see :meth:`run_ended`); the end as
        written here, if it was, is then ``ended[run_id]``. Give it back with :meth:`stop_waiting`."""
        return self.done.add(run_id)

    def stop_waiting(self, run_id: str, event: asyncio.Event) -> None:
        """Drop a wait of :meth:`wait_end`; the last one drops the end kept for it."""
        self.done.drop(run_id, event)
        if run_id not in self.done:
            self.ended.pop(run_id, None)

    def run_ended(self, run_id: str, record: RunRecord | None = None) -> None:
        """Wake whoever waits for ``run_id`` to end; ``record``: its end as written here, which they
        read instead of the store's."""
        if record is not None and run_id in self.done:
            self.ended[run_id] = record
        self.done.notify(run_id)

    async def wait_for(self, awaitable: Awaitable[Any], deadline_ms: int | None) -> bool:
        """Wait for ``awaitable`` or until ``deadline_ms`` on the clock; True when the awaitable
        finished first."""
        task = asyncio.ensure_future(awaitable)
        if deadline_ms is None:
            await task
            return True
        timer = asyncio.ensure_future(self.clock.sleep_until(deadline_ms))
        try:
            done, _ = await asyncio.wait({task, timer}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pending in (task, timer):
                if not pending.done():
                    pending.cancel()
        return task in done
