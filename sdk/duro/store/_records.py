"""The records the store returns and takes: plain frozen dataclasses, separate from the SQLModel
tables, and the marks of how a store call runs (``reads``, ``bulk``). Times are integer milliseconds
since the epoch; the engine turns them into datetimes for users."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar

from .._errors import DuroError
from .._states import RunState, StepKind, StepState


class Fenced(DuroError):
    """The run is no longer this worker's to write (cancelled, or taken over after its lease)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r} is no longer owned by this worker")


class WouldWait(Exception):
    """A call made with ``Connector.without_waiting`` would have waited for a lock: it changed nothing,
    and is to be made again where waiting is fine (a thread)."""


F = TypeVar("F", bound=Callable[..., Any])
MARK = "store_call"  # the attribute a mark is kept in (the gateway reads it inline, on every call)


def reads(fn: F) -> F:
    """Mark a part's method as one that only reads: on SQLite the engine runs it apart from the
    writes, which may wait seconds for a write lock another process holds (WAL lets reads go on
    meanwhile). See ``StoreGateway.call``, which reads the mark (``store_call``) of what it runs."""
    setattr(fn, MARK, "read")
    return fn


def bulk(fn: F) -> F:
    """Mark a part's method as one that may write many transactions (granting many slots,
    1,000 grants each): never tried on the event loop, and on SQLite in a thread of its own."""
    setattr(fn, MARK, "bulk")
    return fn


def store_call(fn: Callable[..., Any]) -> str | None:
    """How a store method is marked: ``"read"``, ``"bulk"`` or ``None`` (a write)."""
    return getattr(fn, MARK, None)


class RunRecord(NamedTuple):
    """A run as stored (immutable: a named tuple, a third of a frozen dataclass's cost to build,
    and runs and steps are built on every hot path). Change one with ``_replace``.

    Times are milliseconds since the Unix epoch, UTC, on the engine's clock: ``created_at`` is
    when the start was accepted (it never changes), ``updated_at`` the last write to the run,
    ``ended_at`` its end (``None`` until then); see ``duro.tooling.RunInfo``."""

    id: str
    namespace: str
    workflow: str
    version: str
    status: RunState
    input: str | None
    output: str | None
    error: str | None
    tags: list[str]
    concurrency_key: str | None
    parent_id: str | None
    parent_seq: int | None
    owner: str | None
    wake_at: int | None
    created_at: int
    updated_at: int
    ended_at: int | None
    trace_context: str | None = None  # the starter's trace (duro._tracing), for every attempt
    cancel_requested_at: int | None = None  # when a cancel was asked for (see Store.cancel_run)
    # the length of its history when a worker died executing it (see Store.remove_worker)
    recovered_steps: int | None = None
    attempt: int = 1  # 1, and one more at each retry (see duro.client._redrive)
    forked_from: str | None = None  # the run a fork copied its history from, and before which seq
    forked_seq: int | None = None
    # set by claim_runs on a run it took from ``pending``: it never executed, so it has no steps and
    # the worker skips reading them (a store that leaves it False costs that read, nothing else)
    fresh: bool = False


class CancelOutcome(NamedTuple):
    """What ``Store.cancel_run`` did: the runs whose cancel it recorded, for their workers to deliver
    into their code (``requested``), and those it ended at once (``ended``: never started)."""

    requested: list[str]
    ended: list[str]


class StepRecord(NamedTuple):
    """One durable call of a run as stored (immutable, like :class:`RunRecord`)."""

    seq: int
    kind: StepKind
    name: str
    status: StepState
    started_at: int
    ended_at: int | None = None
    wake_at: int | None = None
    result: str | None = None
    error: str | None = None
    detail: str | None = None

    def ended(
        self, status: StepState, ended_at: int, *, result: str | None = None, error: str | None = None
    ) -> StepRecord:
        """This call's record at its end: ``status`` at ``ended_at``, with its result or error (its
        seq, kind, name, start, timer and detail kept)."""
        return self._replace(status=status, ended_at=ended_at, result=result, error=error)


@dataclass(slots=True)
class NewRun:
    id: str
    namespace: str
    workflow: str
    version: str
    input: str | None
    owner: str | None
    created_at: int
    tags: list[str] = field(default_factory=list)
    concurrency_key: str | None = None
    parent_id: str | None = None
    parent_seq: int | None = None
    trace_context: str | None = None


@dataclass(slots=True)
class ScheduleRecord:
    namespace: str
    name: str
    workflow: str
    cron: str
    input: str | None
    concurrency: str | None
    next_fire_at: int
    last_fire_at: int | None
    last_run_id: str | None
    last_error: str | None
    created_at: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class QuotaCheck:
    """Count runs with ``key`` in ``statuses`` (within ``namespace`` when set) against ``limit``."""

    workflow: str
    key: str
    limit: int
    statuses: tuple[str, ...]
    namespace: str | None


@dataclass(frozen=True, slots=True)
class Claim:
    worker_id: str
    namespace: str
    workflows: Sequence[str]
    now: int
    limit: int = 100
    serial: Sequence[str] = ()  # workflows whose pending runs start one at a time, oldest first
    # workers the claimer judged dead, with the heartbeat stamp it saw (see duro.rules._lease.Watch): each
    # row is deleted, if its stamp is still that one, before the runs are taken
    expired: Sequence[tuple[str, int]] = ()
    # hand back the runs of owners that have no row first (a worker's full pass asks: see _queries)
    orphans: bool = False
    # the (workflow, version) pairs the claimer has the code of: a run of another version of one of
    # ``workflows`` is left to a worker that has it (empty: any version of ``workflows``)
    versions: Sequence[tuple[str, str]] = ()


def settle_sleeps(steps: list[StepRecord], run: RunRecord) -> list[StepRecord]:
    """Steps as they are: a sleep's record is written once, when it begins (``waiting``), and never
    rewritten. It is over once the run has moved past it: a later record exists, or the run was
    written at or after its wake time (its status going back to ``running`` when it woke, or its
    end). Its end is then its wake time."""
    settled = list(steps)
    for index, step in enumerate(settled):
        if step.kind != "sleep" or step.status != "waiting" or step.wake_at is None:
            continue
        if index + 1 < len(settled) or run.updated_at >= step.wake_at:
            settled[index] = step._replace(status="completed", ended_at=step.wake_at)
    return settled


class Prune(NamedTuple):
    """One batch of a prune: up to ``n`` runs of ``namespace`` that ended before ``cutoff``, after
    ``after`` (the (ended_at, id) of the last run of the batch before). ``dry_run`` counts and deletes
    nothing; ``wait``: on PostgreSQL wait for another worker's batch, else give way to it."""

    namespace: str
    cutoff: int
    after: tuple[int, str]
    n: int
    dry_run: bool = False
    wait: bool = True


class PruneBatch(NamedTuple):
    """What a batch deleted (or would); ``last`` is where the next batch starts (``None``: no run
    was left to look at)."""

    runs: int
    steps: int
    slots: int
    last: tuple[int, str] | None


class Retry(NamedTuple):
    """A retry of run ``run_id`` as its caller read it (``attempt``: its attempt then): on ``version``,
    its ``quota`` checked as for a start (``None``: no quota), at ``now``."""

    run_id: str
    namespace: str | None
    attempt: int
    version: str
    quota: QuotaCheck | None
    now: int


class Fork(NamedTuple):
    """A fork of run ``run_id``: a new run ``new`` whose history is the original's calls before
    ``from_seq`` (cut before its first grant, see ``duro.rules._resume.fork_cut``)."""

    run_id: str
    from_seq: int
    new: NewRun
    quota: QuotaCheck | None


class Redriven(NamedTuple):
    """What a retry or a fork did: the run as it is now, and the seq its execution resumes at."""

    run: RunRecord
    resume_seq: int


class AttemptRecord(NamedTuple):
    """An ended attempt of a retried run (see ``_tables.Attempt``)."""

    attempt: int
    status: str
    error: str | None
    ended_at: int | None
    resume_seq: int
    version: str
    retried_at: int
