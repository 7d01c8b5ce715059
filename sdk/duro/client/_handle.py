"""What users get back: :class:`RunHandle`, and the run and step records it reads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Protocol

from .._clock import ms_to_datetime
from .._serde import error_summary, stored_json
from ..definitions._definitions import RunStatus
from ..store import RunRecord, StepRecord


@dataclass(frozen=True)
class StepInfo:
    """One durable call of a run: ``seq``, ``name``, ``kind`` (step, sleep, now, signal, child,
    start_child, hook, release), ``status`` (waiting, completed, failed; a hook step whose run left
    the queue by ending: cancelled or failed, as the run), times, and ``result`` or ``error``."""

    seq: int
    name: str
    kind: str
    status: str
    started_at: datetime
    ended_at: datetime | None
    result: Any
    error: dict[str, Any] | None
    wake_at: datetime | None = None
    detail: dict[str, Any] | None = None
    attempt: int = 1  # the run's attempt that made the call (a retry makes calls again: docs/redrive.md)

    @classmethod
    def of(cls, rec: StepRecord, attempt: int = 1) -> StepInfo:
        """The step as users see it, from the store's record (times as aware UTC datetimes)."""
        return cls(
            seq=rec.seq,
            name=rec.name,
            kind=rec.kind,
            status=rec.status,
            started_at=ms_to_datetime(rec.started_at),
            ended_at=ms_to_datetime(rec.ended_at),
            result=None if rec.result is None else stored_json(rec.result),
            error=error_summary(rec.error),
            wake_at=ms_to_datetime(rec.wake_at),
            detail=None if rec.detail is None else stored_json(rec.detail),
            attempt=attempt,
        )


@dataclass(frozen=True)
class StepsPage:
    """One page of a run's steps (``engine.steps_page``): ``steps`` in sequence order, and
    ``next_cursor`` to pass for the next page (``None``: no step after these, for now)."""

    steps: list[StepInfo]
    next_cursor: str | None
    MAX_LIMIT: ClassVar[int] = 1000  # steps a page at the most


@dataclass(frozen=True)
class RunsPage:
    """One page of runs, newest first (``engine.runs_page``), and ``next_cursor`` to pass for the
    next page (``None``: no older run). A keyset cursor: runs started while you page never shift
    a page, and none is listed twice."""

    runs: list[RunInfo]
    next_cursor: str | None
    MAX_LIMIT: ClassVar[int] = 1000  # runs a page at the most


@dataclass(frozen=True)
class RunInfo:
    """A run as stored: its workflow, status, input, output or error, tags and times.

    The times are aware datetimes in UTC (stored as UTC, on the engine's clock):

    - ``created_at``: when the run was created, the moment its start was accepted (by
      ``engine.start``, ``POST /api/workflows/{name}/runs``, a parent, a schedule or an event; a
      start refused by a quota creates nothing). It never changes. A run may begin executing
      later (a serial workflow's run waits ``pending``): the first step's ``started_at`` (see
      :class:`StepInfo`) says when its code ran;
    - ``updated_at``: the last write to the run (a status change, a step recorded, a claim);
    - ``ended_at``: when it completed, failed or was cancelled; ``None`` while it has not ended.

    ``attempt`` is 1, and one more after each retry (``engine.retry``); ``forked_from`` is the
    ``(run_id, seq)`` a fork copied its first calls from (``None``: not a fork).
    """

    id: str
    workflow: str
    version: str
    namespace: str
    status: RunStatus
    input: Any
    output: Any
    error: dict[str, Any] | None
    tags: tuple[str, ...]
    parent_id: str | None
    created_at: datetime
    updated_at: datetime
    ended_at: datetime | None
    attempt: int = 1
    forked_from: tuple[str, int] | None = None

    @classmethod
    def of(cls, rec: RunRecord) -> RunInfo:
        """The run as users see it, from the store's record (times as aware UTC datetimes)."""
        return cls(
            id=rec.id,
            workflow=rec.workflow,
            version=rec.version,
            namespace=rec.namespace,
            status=RunStatus(rec.status),
            input=None if rec.input is None else stored_json(rec.input),
            output=None if rec.output is None else stored_json(rec.output),
            error=error_summary(rec.error),
            tags=tuple(rec.tags),
            parent_id=rec.parent_id,
            created_at=ms_to_datetime(rec.created_at),
            updated_at=ms_to_datetime(rec.updated_at),
            ended_at=ms_to_datetime(rec.ended_at),
            attempt=rec.attempt,
            forked_from=None if rec.forked_from is None else (rec.forked_from, rec.forked_seq or 0),
        )


class RunAccess(Protocol):
    """What a handle calls: an :class:`~duro.Engine` (or the harness's stand-in for whichever engine
    runs after a simulated restart)."""

    async def get_run(self, run_id: str) -> RunInfo: ...

    async def result(self, run_id: str, timeout: Any = None) -> Any: ...

    async def steps(self, run_id: str) -> list[StepInfo]: ...

    async def cancel(self, run_id: str) -> None: ...

    async def signal(self, run_id: str, name: str, payload: Any = None) -> None: ...

    async def retry(self, run_id: str, *, version: str | None = None) -> RunHandle: ...

    async def fork(
        self, run_id: str, from_seq: int, *, new_run_id: str | None = None, version: str | None = None
    ) -> RunHandle: ...


class RunHandle:
    """A run by id, on an engine. Handles stay usable across engine restarts (they hold no state).
    Each method raises :class:`~duro.RunNotFoundError` when no run has the id."""

    def __init__(self, engine: RunAccess, run_id: str) -> None:
        self._engine = engine
        self.id = run_id

    async def status(self) -> RunStatus:
        """The run's current :class:`RunStatus`."""
        return (await self._engine.get_run(self.id)).status

    async def info(self) -> RunInfo:
        """The run as stored (:class:`RunInfo`)."""
        return await self._engine.get_run(self.id)

    async def result(self, timeout: Any = None) -> Any:
        """Wait for the run to end and return its output; :class:`RunFailedError` if it failed or was
        cancelled. ``timeout`` (a duration) bounds the wait with a ``TimeoutError``."""
        return await self._engine.result(self.id, timeout)

    async def steps(self) -> list[StepInfo]:
        """The run's durable calls in sequence order."""
        return await self._engine.steps(self.id)

    async def cancel(self) -> None:
        """Cancel the run (and its unfinished children); a run that has ended is left as it is."""
        await self._engine.cancel(self.id)

    async def signal(self, name: str, payload: Any = None) -> None:
        """Send signal ``name`` with a JSON ``payload``; buffered until the run waits for it.
        :class:`~duro.RunEndedError` if the run has ended (nothing is sent)."""
        await self._engine.signal(self.id, name, payload)

    async def retry(self, *, version: str | None = None) -> RunHandle:
        """Retry the run (``failed`` or ``cancelled``) from its failing call: see ``Engine.retry``."""
        return await self._engine.retry(self.id, version=version)

    async def fork(
        self, from_seq: int, *, new_run_id: str | None = None, version: str | None = None
    ) -> RunHandle:
        """A new run from a copy of this run's calls before ``from_seq``: see ``Engine.fork``."""
        return await self._engine.fork(self.id, from_seq, new_run_id=new_run_id, version=version)

    def __repr__(self) -> str:
        return f"<RunHandle {self.id!r}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunHandle) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)
