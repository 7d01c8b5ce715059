"""The store protocol: every method the engine calls on a store, each one mandatory.

A store keeps runs, their steps, signals, schedules, workers and the limits' slots, and applies each
decision in one transaction. Reads return the frozen records of :mod:`._records`; a run's progress
writes arrive as the typed commands of :mod:`._commands` (``apply`` / ``apply_batch``). The contract
suite (``tests/integration/store_contract``) runs against every implementation: a third store is
correct when it passes it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, overload

from .._config import LimitConfig
from .._slots import SlotEvent, SlotRow
from ._commands import (
    Command,
    ConfirmSlot,
    FinishRun,
    GiveUpSlot,
    OwnStep,
    RecordStep,
    ReleaseSlot,
    RequestSlot,
    SendSignal,
    SlotOutcome,
    TakeSignal,
    Unload,
)
from ._records import CancelOutcome, Claim, NewRun, QuotaCheck, RunRecord, ScheduleRecord, StepRecord

if TYPE_CHECKING:
    from ._slot_stats import SlotStats  # its SQL needs SQLAlchemy: a store's, not the protocol's

T = TypeVar("T")


class Store(Protocol):
    """What the engine needs of a store. Every method is mandatory; what varies between stores is
    said by the attributes (``dialect``, ``reads``, ``batches``, ``notifies``), never probed."""

    dialect: str  # "sqlite" or "postgresql": how the engine calls it (see duro._gateway)
    reads: frozenset[str]  # the names of the methods that only read (run apart from writes on SQLite)
    bulk: frozenset[str]  # the methods that may write many transactions (never on the event loop)
    # the commands ``apply_batch`` takes in one shared transaction; the rest go through ``apply`` alone
    batches: frozenset[type[Command]]
    notifies: bool  # whether ``listen`` delivers other processes' changes (else workers poll alone)
    # called after commit with what slot decisions did (duro._slots.SlotEvent): metrics and logs
    slot_listeners: list[Callable[[Sequence[SlotEvent]], None]]

    @property
    def safe_url(self) -> str:
        """The database's URL without its password, for messages."""

    def is_transient(self, err: BaseException) -> bool:
        """Whether the same call may succeed if made again soon (the server restarting, say)."""

    def is_unavailable(self, err: BaseException) -> bool:
        """Whether ``err`` says the database is out of reach or busy (locked), not that the call is wrong."""

    def without_waiting(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` here and now if it needs no lock anyone else holds, else raise
        :class:`WouldWait` having changed nothing (a server database always raises it)."""

    def listen(self, deliver: Callable[[list[Any]], None], stopping: Any) -> None:
        """Deliver the notices other processes commit until ``stopping`` (a ``threading.Event``) is
        set; run in a thread of its own. A store that does not notify (``notifies`` False) returns."""

    def create_schema(self) -> None:
        """Create the tables, or migrate them to this version; idempotent."""

    def close(self) -> None:
        """Release pooled connections; a later call opens them again."""

    # -- runs --------------------------------------------------------------------------------------

    def insert_run(
        self, new: NewRun, quota: QuotaCheck | None, parent: OwnStep | None = None
    ) -> tuple[RunRecord, bool]:
        """Insert ``new`` unless its id exists; returns (run, created). Raises ConcurrencyLimitError,
        and RunIdConflictError when the id is a run of another workflow (nothing written).

        The existing-run check, the quota count and the insert are one atomic decision. ``parent``,
        the starting run's step, is written in the same transaction (fenced like ``RecordStep``;
        its run ``blocked`` when the step waits).
        """

    def get_run(self, run_id: str, namespace: str | None = None) -> RunRecord | None:
        """The run, or ``None`` (also when it is in another namespace than ``namespace``, if given)."""

    def list_runs(
        self,
        namespace: str | None,
        workflow: str | None,
        statuses: Sequence[str] | None,
        tag: str | None,
        limit: int,
        before: tuple[int, str] | None = None,
    ) -> list[RunRecord]:
        """Runs, newest first; ``before`` = (created_at, id) of the previous page's last run."""

    def count_active(self, key: str, statuses: Sequence[str], namespace: str | None) -> int:
        """How many runs tagged ``concurrency:<key>`` are in ``statuses`` (a quota's count)."""

    def recent_durations(self, key: str, namespace: str | None, n: int = 20) -> list[int]:
        """How long (ms, creation to end) the last ``n`` completed runs tagged ``concurrency:<key>``
        lasted, latest end first (within ``namespace`` when set): one bounded index walk, made only
        when a start is refused (its ``retry_after`` estimate)."""

    def run_statuses(self, run_ids: Iterable[str]) -> dict[str, str]:
        """The status of each known run, in one query."""

    def get_steps(self, run_id: str) -> list[StepRecord]:
        """The run's steps in sequence order, as written (see ``settle_sleeps``)."""

    def get_steps_page(self, run_id: str, after: int, limit: int) -> list[StepRecord]:
        """At most ``limit`` of the run's steps after sequence number ``after``, in order."""

    def cancel_run(self, run_id: str, namespace: str | None, error: str, now: int) -> CancelOutcome:
        """Cancel the run and its unfinished descendants: one that nobody holds and that never made a
        durable call ends ``cancelled`` now (with ``error``); any other unfinished one gets the
        request (``cancel_requested_at``), due at once, for its worker to deliver into its code."""

    def cancel_requested(self, run_ids: Iterable[str]) -> set[str]:
        """Which of these unfinished runs have a cancel request (a worker's poll pass)."""

    # -- a run's progress: typed commands, each fenced on (run id, owner, not finished) -------------

    @overload
    def apply(self, command: RecordStep | FinishRun | SendSignal) -> bool: ...
    @overload
    def apply(self, command: TakeSignal) -> StepRecord | None: ...
    @overload
    def apply(self, command: RequestSlot | ConfirmSlot | GiveUpSlot | ReleaseSlot) -> SlotOutcome: ...
    @overload
    def apply(self, command: Unload) -> list[str]: ...
    def apply(self, command: Command) -> bool | StepRecord | SlotOutcome | list[str] | None:
        """Apply one command in a transaction of its own (see :mod:`._commands` for each result)."""

    def apply_batch(self, commands: Sequence[Command]) -> list[Any]:
        """Apply commands of many runs (of the types in ``batches``) in one transaction, each with
        its own fence and result, in order: a fenced command changes nothing and disturbs no other."""

    # -- signals -----------------------------------------------------------------------------------

    def send_signal(self, run_id: str, name: str, payload: str | None, now: int) -> None:
        """Buffer signal ``name`` for the run (an error if the run is unknown or finished)."""

    def signalled(self, run_ids: Iterable[str]) -> set[tuple[str, str]]:
        """(run id, signal name) of every unconsumed signal of these runs."""

    # -- schedules ---------------------------------------------------------------------------------

    def put_schedule(self, schedule: ScheduleRecord) -> None:
        """Create the schedule, or replace its definition (keeping its last outcome)."""

    def list_schedules(self, namespace: str) -> list[ScheduleRecord]:
        """The namespace's schedules, by name."""

    def delete_schedule(self, namespace: str, name: str) -> bool:
        """Delete the schedule; False when there was none."""

    def due_schedules(self, namespace: str, workflows: Sequence[str], now: int) -> list[ScheduleRecord]:
        """Schedules of these workflows whose next window is due by ``now``."""

    def next_schedule_due(self, namespace: str, workflows: Sequence[str]) -> int | None:
        """The earliest next window of these workflows' schedules."""

    def claim_schedule_window(self, namespace: str, name: str, due: int, next_due: int, now: int) -> bool:
        """Move the schedule from window ``due`` to ``next_due``; False if another worker did first."""

    def record_schedule_outcome(
        self, namespace: str, name: str, fired_at: int, run_id: str | None, error: str | None
    ) -> None:
        """What the window fired at ``fired_at`` did: the run it started, or why it started none."""

    # -- limits: each call applies one decision of duro._slots in one transaction ------------------

    def slots_leave(
        self, configs: Mapping[str, LimitConfig], run_ids: Iterable[str], now: int
    ) -> list[SlotRow]:
        """Ended runs leave the queues they wait in (their hook steps closed with the run's end);
        returns the rows handed out to the next waiters."""

    def slots_expire(
        self, configs: Mapping[str, LimitConfig], now: int
    ) -> tuple[list[SlotRow], list[SlotRow]]:
        """Apply every expiry due by ``now`` and hand free capacity out: (changed rows, granted rows)."""

    def next_slot_due(self, now: int | None = None, limits: Iterable[str] | None = None) -> int | None:
        """The earliest due instant of any slot (of ``limits`` when given), on the caller's clock
        when ``now`` is given."""

    def get_slot(self, slot_id: str) -> SlotRow | None:
        """The slot request, or ``None``."""

    def slot_states(self, slot_ids: Iterable[str]) -> dict[str, str]:
        """The state of each known slot, in one query."""

    def limit_states(self) -> dict[str, Any]:
        """Each limit's row: overrides and counts (``LimitState``), by name."""

    def declare_limits(self, configs: Iterable[LimitConfig], now: int) -> None:
        """Record each limit's declared capacity and max hold (a worker's config, at its start), so
        that an engine without the project lists them (``limit_states``: ``capacity``, ``max_hold_ms``)."""

    def limit_slots(self, name: str, max_rows: int = 10_000) -> list[SlotRow]:
        """The limit's active slots: busy and reserved first, then the queue in order."""

    def set_limit_override(
        self, config: LimitConfig, field: str, value: int | None, now: int
    ) -> list[SlotRow]:
        """Set (``None``: reset) the ``capacity`` or ``max_hold`` override; returns rows granted."""

    def limit_stats(self, name: str, since_ms: int) -> SlotStats:
        """The limit's figures since ``since_ms``, in one query: slots that became held and their
        waits' p50/p90/p99, expiries (taken back by ``max_hold``) and timeouts (see ``_slot_stats``)."""

    def queued_limits(self, run_ids: Iterable[str]) -> dict[str, str]:
        """The limit whose queue each of these runs waits in (slot waiting or reserved), in one query."""

    def unfinished_by_version(self, namespace: str) -> dict[tuple[str, str], int]:
        """``{(workflow, version): unfinished runs}`` of ``namespace`` (pending, running, suspended,
        blocked), in one query; pairs with none are left out (see ``_versions``)."""

    # -- workers and leases ------------------------------------------------------------------------

    def register_worker(self, worker_id: str, namespace: str, host: str, pid: int, now: int) -> None:
        """Add (or renew) the worker's row; its heartbeat is the lease on the runs it owns."""

    def heartbeat(self, worker_id: str, now: int) -> dict[str, int] | None:
        """Move the worker's heartbeat stamp forward (by at least 1); the stamps of every worker of its
        namespace, or ``None`` when its row is gone (condemned by a claim)."""

    def count_recovery(self, run_id: str, owner: str) -> int | None:
        """Count one more attempt at a run a dead worker left (``recoveries``, see
        ``duro._recovery``) and return the count; ``None`` if the run is not ``owner``'s."""

    def remove_worker(self, worker_id: str, now: int, dead: bool = False) -> None:
        """Delete the worker and hand its unfinished runs back (owner cleared) for others to claim.
        ``dead``: its process is gone, so each run it was executing counts a recovery (``recoveries``,
        in a row while the run's history has not grown), as for a worker condemned by a claim."""

    def local_workers(self, host: str) -> list[tuple[str, int]]:
        """(worker id, pid) of the workers registered from ``host``."""

    def claim_runs(self, claim: Claim) -> list[RunRecord]:
        """Delete the rows of ``claim.condemned`` whose stamp is unchanged (handing their runs back),
        then take up to ``claim.limit`` unowned unfinished runs that are due, in due order, in one
        transaction."""

    def next_due(self, claim: Claim) -> int | None:
        """The earliest due time of a run ``claim`` could take (its namespace and workflows; a serial
        workflow's pending run excepted, see ``claim_runs``), or ``None``."""
