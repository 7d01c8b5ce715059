"""The narrow store interface the engine talks to, and the records it returns.

Records are plain dataclasses, separate from the SQLModel tables. Times in records are integer
milliseconds since the epoch; the engine turns them into datetimes for users.

Optional methods: a custom store may leave out ``count_active`` (the engine then counts a listing
of ``list_runs``), ``apply_batch`` (progress writes then commit one by one) and ``listen`` (workers
in other processes then learn of changes by polling alone) — every other method is required.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from .._errors import DuroError


class Fenced(DuroError):
    """The run is no longer this worker's to write (cancelled, or taken over after its lease)."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        super().__init__(f"run {run_id!r} is no longer owned by this worker")


class WouldWait(Exception):
    """A call made with ``Store.without_waiting`` would have waited for a lock: it changed nothing,
    and is to be made again where waiting is fine (a thread)."""


@dataclass(slots=True)
class RunRecord:
    id: str
    namespace: str
    workflow: str
    version: str
    status: str
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
    # set by claim_runs on a run it took from ``pending``: it never executed, so it has no steps and
    # the worker skips reading them (a store that leaves it False costs that read, nothing else)
    fresh: bool = False


@dataclass(slots=True)
class StepRecord:
    seq: int
    kind: str
    name: str
    status: str
    started_at: int
    ended_at: int | None = None
    wake_at: int | None = None
    result: str | None = None
    error: str | None = None
    detail: str | None = None


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


@dataclass(slots=True)
class Claim:
    worker_id: str
    namespace: str
    workflows: Sequence[str]
    now: int
    limit: int = 100
    serial: Sequence[str] = ()  # workflows whose pending runs start one at a time, oldest first
    # workers the claimer judged dead, with the heartbeat stamp it saw (see duro._lease.Watch): each
    # row is deleted, if its stamp is still that one, before the runs are taken
    condemned: Sequence[tuple[str, int]] = ()


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
            settled[index] = replace(step, status="completed", ended_at=step.wake_at)
    return settled


class Store(Protocol):
    dialect: str
    safe_url: str  # the database's URL without its password, for messages
    reads: frozenset[str]  # the names of the methods that only read (see Engine._executor_for)

    def is_transient(self, err: BaseException) -> bool:
        """Whether the same call may succeed if made again soon (the server restarting, say)."""

    def is_unavailable(self, err: BaseException) -> bool:
        """Whether ``err`` says the database is out of reach or busy (locked), not that the call is wrong."""

    def without_waiting(self, fn: Any, *args: Any) -> Any:
        """``fn(*args)`` here and now if it needs no lock anyone else holds, else raise
        :class:`WouldWait` having changed nothing (a server database always raises it)."""

    def create_schema(self) -> None: ...

    def close(self) -> None: ...

    # runs
    def insert_run(
        self,
        new: NewRun,
        quota: QuotaCheck | None,
        parent_step: tuple[str, str | None, StepRecord] | None = None,
    ) -> tuple[RunRecord, bool]:
        """Insert ``new`` unless its id exists; returns (run, created). Raises ConcurrencyLimitError,
        and RunIdConflictError when the id is a run of another workflow (nothing written).

        The existing-run check, the quota count and the insert are one atomic decision. With
        ``parent_step`` = (parent run id, parent owner, step), the parent's step is written in the
        same transaction (fenced like ``record_step``).
        """

    def get_run(self, run_id: str, namespace: str | None = None) -> RunRecord | None: ...

    def list_runs(
        self,
        namespace: str | None,
        workflow: str | None,
        statuses: Sequence[str] | None,
        tag: str | None,
        limit: int,
        before: tuple[int, str] | None = None,
    ) -> list[RunRecord]: ...

    def count_active(self, key: str, statuses: Sequence[str], namespace: str | None) -> int: ...

    def run_statuses(self, run_ids: Iterable[str]) -> dict[str, str]: ...

    # execution, fenced on (run id, owner, not terminal): False means "not yours any more"
    def get_steps(self, run_id: str) -> list[StepRecord]: ...

    def record_step(
        self,
        run_id: str,
        owner: str | None,
        step: StepRecord | None,
        run_status: str | None = None,
        wake_at: int | None = None,
        now: int = 0,
    ) -> bool:
        """Write ``step`` and set the run's status and timer; ``step=None`` touches the run only
        (a sleep that ended: see :func:`settle_sleeps`)."""

    def apply_batch(self, ops: list[tuple[str, tuple[object, ...]]]) -> list[object]:
        """Optional: apply ``record_step`` / ``finish_run`` calls (name, args) in one transaction.
        A store whose ``batched`` attribute (optional) names more methods (``slot_request``,
        ``slot_release``) gets those in its batches too."""

    def finish_run(
        self, run_id: str, owner: str | None, status: str, output: str | None, error: str | None, now: int
    ) -> bool: ...

    def cancel_run(self, run_id: str, namespace: str | None, error: str, now: int) -> list[str]:
        """Cancel the run and its unfinished descendants; returns the ids actually cancelled."""

    # signals
    def send_signal(self, run_id: str, name: str, payload: str | None, now: int) -> None: ...

    def take_signal(self, run_id: str, owner: str | None, name: str, step: StepRecord) -> StepRecord | None:
        """Consume the oldest unconsumed signal ``name`` and complete ``step`` with its payload."""

    def signalled(self, run_ids: Iterable[str]) -> set[tuple[str, str]]: ...

    # schedules
    def put_schedule(self, schedule: ScheduleRecord) -> None:
        """Create the schedule, or replace its definition (keeping its last outcome)."""

    def list_schedules(self, namespace: str) -> list[ScheduleRecord]: ...

    def delete_schedule(self, namespace: str, name: str) -> bool: ...

    def due_schedules(self, namespace: str, workflows: Sequence[str], now: int) -> list[ScheduleRecord]: ...

    def next_schedule_due(self, namespace: str, workflows: Sequence[str]) -> int | None: ...

    def claim_schedule_window(self, namespace: str, name: str, due: int, next_due: int, now: int) -> bool:
        """Move the schedule from window ``due`` to ``next_due``; False if another worker did first."""

    def record_schedule_outcome(
        self, namespace: str, name: str, fired_at: int, run_id: str | None, error: str | None
    ) -> None: ...

    # limits: each call applies one decision of duro._slots in one transaction (see _slots_sql.py)
    def slot_request(
        self,
        config: Any,
        slot_id: str,
        run_id: str | None,
        label: str | None,
        timeout_at: int | None,
        now: int,
        hook: Any = None,
    ) -> Any: ...

    def slot_confirm(
        self, config: Any, slot_id: str, now: int, hook: Any = None
    ) -> tuple[Any, list[Any]]: ...

    def slot_give_up(self, config: Any, slot_id: str, now: int, hook: Any = None) -> Any: ...

    def slot_release(
        self,
        configs: Any,
        slot_id: str,
        now: int,
        reason: str = "release",
        hook: Any = None,
        takers: Any = None,
    ) -> tuple[Any, bool, list[Any]]: ...

    def slots_leave(self, configs: Any, run_ids: Iterable[str], now: int) -> list[Any]: ...

    def slots_expire(self, configs: Any, now: int) -> tuple[list[Any], list[Any]]: ...

    def next_slot_due(self, now: int | None = None) -> int | None:
        """The earliest due instant of any slot, on the caller's clock when ``now`` is given."""

    def get_slot(self, slot_id: str) -> Any: ...

    def slot_states(self, slot_ids: Iterable[str]) -> dict[str, str]: ...

    def limit_states(self) -> dict[str, Any]: ...

    def limit_slots(self, name: str, max_rows: int = 10_000) -> list[Any]: ...

    def set_limit_override(self, config: Any, field: str, value: int | None, now: int) -> list[Any]: ...

    # workers and leases
    def register_worker(self, worker_id: str, namespace: str, host: str, pid: int, now: int) -> None: ...

    def heartbeat(self, worker_id: str, now: int) -> dict[str, int] | None:
        """Move the worker's heartbeat stamp forward (by at least 1); the stamps of every worker of its
        namespace, or ``None`` when its row is gone (condemned by a claim)."""

    def remove_worker(self, worker_id: str, now: int) -> None:
        """Delete the worker and hand its unfinished runs back (owner cleared) for others to claim."""

    def local_workers(self, host: str) -> list[tuple[str, int]]: ...

    def claim_runs(self, claim: Claim) -> list[RunRecord]:
        """Delete the rows of ``claim.condemned`` whose stamp is unchanged, then take unfinished runs
        with no owner or an owner without a row, oldest first, in one transaction."""
