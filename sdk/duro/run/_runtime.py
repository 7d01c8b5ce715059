"""What a run's execution reaches outside itself: the :class:`Runtime` a worker builds once and
shares with every run it executes (the store gateway, the clock, the lease, the wake-ups, the
registry, the start path, the limits), and the ports it is typed by. Never the engine."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Executor
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any, Protocol

from .._clock import Clock
from .._durations import Duration
from .._errors import DuroError, DuroInterrupt, StoreUnavailable
from .._events import EventBus
from .._hooks import EngineHooks
from ..client._starts import Starter
from ..definitions._definitions import Registry
from ..rules._lease import OwnLease
from ..worker._gateway import StoreGateway
from ..worker._wakeups import Wakeups


class LostRun(DuroInterrupt):
    """Internal: this worker may no longer write the run (cancelled, or another worker took it)."""


class StoreFailed(LostRun):
    """Internal: the store failed a write of this run (disk full, the database gone): the run stops
    here, and its worker hands it back, due at once, for whoever can write again (see RunEnds)."""


def store_failed(err: BaseException) -> bool:
    """Whether ``err``, from a write, is the store failing to write at all (``StoreUnavailable``, a
    driver's ``OperationalError`` or ``InterfaceError``: a full disk, an I/O error, the database
    gone), which passes, rather than refusing this write (a DuroError such as a signal to an ended
    run, a constraint or a trigger), which the run's code sees and which fails the run."""
    if isinstance(err, StoreUnavailable | OSError):
        return True
    if isinstance(err, DuroError):
        return False
    return any(kind.__name__ in ("OperationalError", "InterfaceError") for kind in type(err).__mro__)


class Evicted(LostRun):
    """Internal: the worker evicted this idle run from memory (it is replayed when its wait ends)."""


class Residency(Protocol):
    """Where a run tells its worker it goes idle at a wait and wakes (``Residents`` in ``duro.worker._worker``)."""

    def went_idle(self, ctx: Any) -> None: ...

    def woke(self, ctx: Any) -> None: ...

    def leaves_at_once(self, due_at: int) -> bool:
        """Whether a sleep until ``due_at`` would leave memory as soon as it goes idle."""


class Lease(Protocol):
    """The worker's lease on the runs it executes (duro.worker._heartbeat.Heartbeat)."""

    lease: OwnLease  # until when it is good: read in place where every resume asks (see owns_runs)

    def owns_runs(self) -> bool:
        """Whether no other worker can have taken our runs now."""

    async def confirm(self) -> None:
        """Wait until the store confirms the lease (or every run was dropped, raising LostRun in each)."""


class SlotPort(Protocol):
    """The limits' durable calls (duro.limits), for the class form's ``ctx.acquire_slot`` & co.
    ``ctx`` is the calling run's :class:`duro.run._context.RunContext`."""

    async def acquire(
        self, ctx: Any, limit: str, label: str | None, timeout: Duration | None, key: str | None = None
    ) -> Any: ...

    async def release(self, ctx: Any, slot_id: str) -> Any: ...

    async def with_limit(
        self,
        ctx: Any,
        limit: str,
        fn: Any,
        label: str | None,
        timeout: Duration | None,
        key: str | None = None,
    ) -> Any: ...

    def limit_slot(
        self, ctx: Any, limit: str, label: str | None, timeout: Duration | None, key: str | None = None
    ) -> AbstractAsyncContextManager[Any]: ...


class RatePort(Protocol):
    """The rates' durable call (duro.rates), for the class form's ``ctx.acquire_rate``."""

    async def acquire(
        self, ctx: Any, name: str, key: str | None = None, cost: int = 1, timeout: Duration | None = "24h"
    ) -> Any: ...

    async def for_step(self, ctx: Any, name: str, wait_id: str, waiting: Any) -> None: ...

    async def pause_for(self, ctx: Any, limited: Any) -> int: ...


class RetryPort(Protocol):
    """Retries (duro.client._redrive), for a retried parent whose re-run child call finds its child failed."""

    async def retry(self, run_id: str, version: str | None = None, known: Any = None) -> Any: ...


@dataclass(frozen=True)
class Runtime:
    """What a run's execution needs, built once by its worker and shared by every run it executes."""

    worker_id: str
    clock: Clock
    gateway: StoreGateway
    events: EventBus
    registry: Registry
    starter: Starter
    wakeups: Wakeups
    lease: Lease
    hooks: EngineHooks
    step_executor: Executor
    handle: Callable[[str], Any]  # the RunHandle of a run id (start_child returns one)
    slots: SlotPort
    rates: RatePort
    residency: Residency
    redrive: RetryPort


class SlotCalls:
    """The limits' durable calls as methods (the class form's ``ctx`` offers every durable helper);
    a base of ``duro.run._context.RunContext``."""

    runtime: Runtime

    async def acquire_slot(
        self, limit: str, label: str | None = None, timeout: Duration | None = "24h", key: str | None = None
    ) -> Any:
        """See :func:`duro.acquire_slot`."""
        return await self.runtime.slots.acquire(self, limit, label, timeout, key)

    async def release_slot(self, slot_id: str) -> Any:
        """See :func:`duro.release_slot`."""
        return await self.runtime.slots.release(self, slot_id)

    async def with_limit(
        self,
        limit: str,
        fn: Any,
        label: str | None = None,
        timeout: Duration | None = "24h",
        key: str | None = None,
    ) -> Any:
        """See :func:`duro.with_limit`."""
        return await self.runtime.slots.with_limit(self, limit, fn, label, timeout, key)

    def limit_slot(
        self, limit: str, label: str | None = None, timeout: Duration | None = "24h", key: str | None = None
    ) -> AbstractAsyncContextManager[Any]:
        """See :func:`duro.limit_slot`."""
        return self.runtime.slots.limit_slot(self, limit, label, timeout, key)

    async def acquire_rate(
        self, name: str, key: str | None = None, cost: int = 1, timeout: Duration | None = "24h"
    ) -> Any:
        """See :func:`duro.acquire_rate`."""
        return await self.runtime.rates.acquire(self, name, key, cost, timeout)
