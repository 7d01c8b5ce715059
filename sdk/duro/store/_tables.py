"""The schema: every duro table, in this one module (SQLModel, on a registry of its own).

Times are integer milliseconds since the Unix epoch (UTC): portable, indexable, and compared the same
way on SQLite and PostgreSQL. Payloads are JSON text. Bump ``SCHEMA_VERSION`` with every change and
add a migration step in ``_schema.py``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypedDict

from sqlalchemy import BigInteger, Column, Index, Table, Text, text
from sqlalchemy.orm import registry
from sqlalchemy.sql.elements import TextClause
from sqlmodel import Field, SQLModel

if TYPE_CHECKING:
    from typing_extensions import Unpack  # typing.Unpack is 3.12+; only annotations use it

from .._states import ENDED, RETRYABLE, UNFINISHED

SCHEMA_VERSION = 13
NOTIFY_CHANNEL = "duro"  # PostgreSQL's LISTEN/NOTIFY channel of every duro store (see _notify)


# unfinished runs, as SQL: the partial index's condition and the queries that use it say it
# identically (SQLite matches a partial index's condition term for term, with literal values)
ACTIVE_SQL = "(" + ", ".join(f"'{status}'" for status in UNFINISHED) + ")"
TERMINAL_SQL = "(" + ", ".join(f"'{status}'" for status in ENDED) + ")"
RETRYABLE_SQL = "(" + ", ".join(f"'{status}'" for status in RETRYABLE) + ")"


class _Where(TypedDict):
    sqlite_where: TextClause


class _ColumnOptions(TypedDict, total=False):
    nullable: bool
    default: int | str


def _where(condition: str) -> _Where:
    """A partial index's condition, the same SQL on both databases: given for SQLite here, and for
    PostgreSQL by :func:`partial_on_postgresql` when a PostgreSQL store opens (naming PostgreSQL's
    option here would load SQLAlchemy's PostgreSQL dialect in every process, SQLite's too)."""
    return {"sqlite_where": text(condition)}


class DuroTable(SQLModel, registry=registry()):
    """Base of duro's tables; its own metadata keeps them apart from the app's SQLModel tables."""


# Each returns what sqlmodel's ``Field`` returns, ``Any``: a field's declared type is its annotation
def _ms(**kw: Unpack[_ColumnOptions]) -> Any:
    return Field(sa_column=Column(BigInteger, **kw))


def _text(**kw: Unpack[_ColumnOptions]) -> Any:
    return Field(sa_column=Column(Text, **kw))


class Meta(DuroTable, table=True):
    __tablename__ = "duro_meta"
    key: str = Field(primary_key=True, max_length=64)
    value: str = Field(max_length=256)


class Run(DuroTable, table=True):
    """One workflow run. ``owner`` is the worker executing it (or holding it while it waits);
    ``wake_at`` its next timer, if any.

    ``due_at`` is when a worker must take the run up if nobody holds it: a pending or running run
    from when it was last written; a waiting run (``suspended``, ``blocked``, or evicted from a
    slot's queue) when its wait ends (its timer, or NULL when it waits with no time limit), or at
    once when what it waits for happens (a signal, a slot handed to it, its child's end: the writer
    of that event sets it); NULL for a finished run.
    """

    __tablename__ = "duro_runs"
    __table_args__ = (
        # Unfinished runs by status: lists of active runs (Studio, list_runs with a status filter)
        # read them here, not through every finished run (schema 4's claim indexes, kept for that)
        Index("duro_runs_claim", "namespace", "status", "owner").ddl_if(dialect="sqlite"),
        # unfinished runs newest first (schema 12: of every namespace, on both databases): a list of
        # unfinished runs reads them alone, however many finished runs the store keeps
        Index("duro_runs_active", "created_at", "id", **_where(f"status IN {ACTIVE_SQL}")),
        # The runs a claim looks at (schema 5): unowned runs with a due time, in due order. A run
        # executing or held by a worker is outside it, and so is a run that waits with no time
        # (a signal, a child): a million runs asleep or idle cost a claim one index probe.
        Index("duro_runs_due", "namespace", "due_at", "id", **_where("owner IS NULL AND due_at IS NOT NULL")),
        # the unfinished runs a worker holds: handed back at once when it stops or is found dead
        # (schema 5; a finished run leaves it, so a worker's past runs never slow a hand-back)
        Index("duro_runs_owner", "owner", **_where(f"owner IS NOT NULL AND status IN {ACTIVE_SQL}")),
        # partial: a start without a quota or a parent writes neither (schema 4; each was about a
        # tenth of a start's SQLite time). A quota's count reads (key, status); a refusal's estimate
        # of when to retry reads a key's last completed runs by their end (schema 7): the end comes
        # with the status, so the entry is rewritten at the run's end either way
        Index(
            "duro_runs_quota",
            "concurrency_key",
            "status",
            "ended_at",
            **_where("concurrency_key IS NOT NULL"),
        ),
        Index("duro_runs_parent", "parent_id", **_where("parent_id IS NOT NULL")),
        # every run newest first (schema 12: of every namespace, as a listing reads them unless the
        # engine fences reads, and in the keyset order of its pages): a page reads its rows alone
        Index("duro_runs_list", "created_at", "id"),
        # finished runs by their end (schema 12): what a retention pass or a prune deletes, oldest
        # first, and the runs replay-check reads since a moment, without the rest of the history
        Index("duro_runs_ended", "ended_at", "id", **_where("ended_at IS NOT NULL")),
    )
    id: str = Field(primary_key=True, max_length=200)
    namespace: str = Field(max_length=64)
    workflow: str = Field(max_length=200)
    version: str = Field(max_length=64)
    status: str = Field(max_length=16)
    input: str | None = _text(nullable=True)
    output: str | None = _text(nullable=True)
    error: str | None = _text(nullable=True)
    tags: str = _text(nullable=False, default="[]")
    concurrency_key: str | None = Field(default=None, max_length=256, nullable=True)
    parent_id: str | None = Field(default=None, max_length=200, nullable=True)
    parent_seq: int | None = Field(default=None, nullable=True)
    owner: str | None = Field(default=None, max_length=64, nullable=True)
    wake_at: int | None = _ms(nullable=True)
    created_at: int = _ms(nullable=False)
    updated_at: int = _ms(nullable=False)
    ended_at: int | None = _ms(nullable=True)
    due_at: int | None = _ms(nullable=True)
    # the W3C trace context (JSON: traceparent, tracestate) of the code that started the run, so
    # every attempt, in any process, continues its trace (schema 6; NULL without OpenTelemetry)
    trace_context: str | None = Field(default=None, max_length=1024, nullable=True)
    # when a cancel was asked for (schema 7): the worker holding the run delivers it into its code,
    # which ends the run (see docs/durability.md, "Cancelling a run")
    cancel_requested_at: int | None = _ms(nullable=True)
    # the length of its history when a worker died while executing it, and how many attempts
    # were made at that point since (see duro.worker._recovery; schema 7)
    recoveries: int | None = Field(default=None, nullable=True)
    recovered_steps: int | None = Field(default=None, nullable=True)
    # how many times it was started (schema 13): 1, and one more at each retry (see duro.client._redrive)
    attempt: int = Field(default=1, sa_column_kwargs={"server_default": "1"})
    # the run and sequence number a fork copied its history from (schema 13)
    forked_from: str | None = Field(default=None, max_length=200, nullable=True)
    forked_seq: int | None = Field(default=None, nullable=True)


class Step(DuroTable, table=True):
    """One durable call of a run, at its sequence number ``seq``.

    ``kind``: step, sleep, now, signal, child, start_child. ``status``: waiting, completed, failed.
    ``detail`` is JSON: the signal name, the child run id, the retry count...
    """

    __tablename__ = "duro_steps"
    run_id: str = Field(primary_key=True, max_length=200)
    seq: int = Field(primary_key=True)
    kind: str = Field(max_length=16)
    name: str = Field(max_length=200)
    status: str = Field(max_length=16)
    started_at: int = _ms(nullable=False)
    ended_at: int | None = _ms(nullable=True)
    wake_at: int | None = _ms(nullable=True)
    result: str | None = _text(nullable=True)
    error: str | None = _text(nullable=True)
    detail: str | None = _text(nullable=True)


class Attempt(DuroTable, table=True):
    """An ended attempt of a run that was retried (schema 13): how it ended (``status``, ``error``,
    ``ended_at``), and where the next attempt, number ``attempt + 1``, resumed (``resume_seq``: the
    calls from there on were moved to ``duro_past_steps``) on which ``version``, when."""

    __tablename__ = "duro_attempts"
    run_id: str = Field(primary_key=True, max_length=200)
    attempt: int = Field(primary_key=True)
    status: str = Field(max_length=16)
    error: str | None = _text(nullable=True)
    ended_at: int | None = _ms(nullable=True)
    resume_seq: int
    version: str = Field(max_length=64)
    retried_at: int = _ms(nullable=False)


class PastStep(DuroTable, table=True):
    """A call of an earlier attempt that a retry made again (schema 13): the step as that attempt
    left it, kept for people (a run's steps show it beside the new attempt's); never replayed."""

    __tablename__ = "duro_past_steps"
    run_id: str = Field(primary_key=True, max_length=200)
    attempt: int = Field(primary_key=True)
    seq: int = Field(primary_key=True)
    kind: str = Field(max_length=16)
    name: str = Field(max_length=200)
    status: str = Field(max_length=16)
    started_at: int = _ms(nullable=False)
    ended_at: int | None = _ms(nullable=True)
    wake_at: int | None = _ms(nullable=True)
    result: str | None = _text(nullable=True)
    error: str | None = _text(nullable=True)
    detail: str | None = _text(nullable=True)


class Signal(DuroTable, table=True):
    """A signal sent to a run; buffered until a ``wait_for_signal`` of that name consumes it."""

    __tablename__ = "duro_signals"
    __table_args__ = (Index("duro_signals_run", "run_id", "name", "consumed_seq"),)
    id: int | None = Field(default=None, primary_key=True)
    run_id: str = Field(max_length=200)
    name: str = Field(max_length=200)
    payload: str | None = _text(nullable=True)
    created_at: int = _ms(nullable=False)
    consumed_seq: int | None = Field(default=None, nullable=True)


class Worker(DuroTable, table=True):
    """A live worker: its heartbeat is the lease on every run it owns."""

    __tablename__ = "duro_workers"
    id: str = Field(primary_key=True, max_length=64)
    namespace: str = Field(max_length=64)
    host: str = Field(max_length=255)
    pid: int
    started_at: int = _ms(nullable=False)
    heartbeat_at: int = _ms(nullable=False)


class Schedule(DuroTable, table=True):
    """A persisted cron schedule (schema version 2). ``next_fire_at`` is the next window to fire;
    ``concurrency`` (JSON ``{"key", "limit", "count_statuses"}``) is the schedule's own quota."""

    __tablename__ = "duro_schedules"
    __table_args__ = (Index("duro_schedules_due", "namespace", "next_fire_at"),)
    namespace: str = Field(primary_key=True, max_length=64)
    name: str = Field(primary_key=True, max_length=100)
    workflow: str = Field(max_length=200)
    cron: str = Field(max_length=200)
    input: str | None = _text(nullable=True)
    concurrency: str | None = _text(nullable=True)
    next_fire_at: int = _ms(nullable=False)
    last_fire_at: int | None = _ms(nullable=True)
    last_run_id: str | None = Field(default=None, max_length=200, nullable=True)
    last_error: str | None = _text(nullable=True)
    created_at: int = _ms(nullable=False)
    updated_at: int = _ms(nullable=False)


class LimitRow(DuroTable, table=True):
    """A limit's live counts, queue counter and operator overrides (schema version 3). The config
    file declares limits; this row exists once a limit is used or overridden."""

    __tablename__ = "duro_limits"
    name: str = Field(primary_key=True, max_length=64)
    # as the last worker to start declared it in its duro.config.py (schema 7): what an engine
    # without the project (a client) lists
    capacity: int | None = Field(default=None, nullable=True)
    max_hold_ms: int | None = _ms(nullable=True)
    per_key: int | None = Field(default=None, nullable=True)  # a keyed limit's, as declared (schema 8)
    capacity_override: int | None = Field(default=None, nullable=True)
    max_hold_override_ms: int | None = _ms(nullable=True)
    busy: int = Field(default=0)
    reserved: int = Field(default=0)
    waiting: int = Field(default=0)
    next_pos: int = _ms(nullable=False, default=0)
    updated_at: int = _ms(nullable=False)


class LimitKeyRow(DuroTable, table=True):
    """One key of a keyed limit (schema version 9): its live counts, and an operator's capacity for
    it until reset. A key has a row while it has a busy, reserved or waiting slot, or an override.

    ``open_pos`` is the position of the key's oldest waiter while the key has room (busy + reserved
    below its capacity), else NULL: a grant pass reads the keys that can take a slot, oldest waiter
    first, through ``duro_limit_keys_open``, however many keys are full. Slots without a key in a
    keyed limit (queued before it was keyed) count under the key ``''``, which no request can name."""

    __tablename__ = "duro_limit_keys"
    __table_args__ = (
        Index("duro_limit_keys_open", "limit_name", "open_pos", **_where("open_pos IS NOT NULL")),
    )
    limit_name: str = Field(primary_key=True, max_length=64)
    limit_key: str = Field(primary_key=True, max_length=200)
    capacity_override: int | None = Field(default=None, nullable=True)
    busy: int = Field(default=0)
    reserved: int = Field(default=0)
    waiting: int = Field(default=0)
    open_pos: int | None = _ms(nullable=True)
    updated_at: int = _ms(nullable=False)


class SlotRequest(DuroTable, table=True):
    """One ``acquire_slot``: waiting in the queue, reserved, busy, or ended (schema version 3).
    ``due_at`` is when it changes on its own (max_hold, reservation or timeout), NULL once ended."""

    __tablename__ = "duro_slots"
    __table_args__ = (
        Index("duro_slots_queue", "limit_name", "state", "pos"),
        # partial (schema 4): an ended slot leaves the due index, and only a waiting or reserved slot
        # is looked up by its run (to leave the queue), so a slot granted at once never enters it
        Index("duro_slots_due", "due_at", **_where("due_at IS NOT NULL")),
        Index("duro_slots_run", "run_id", **_where("state IN ('waiting', 'reserved')")),
        # ended slots by limit and end (schema 6): a limit's last hour (Studio, duro.limits.stats)
        # reads that hour's ends, not the limit's whole history of ended slots
        Index("duro_slots_ended", "limit_name", "ended_at", **_where("ended_at IS NOT NULL")),
        # a keyed limit's waiters by key (schema 8): a key's queue. Schema 9: its waiters only (a
        # slot granted at once never enters it), key first and its limit last: a key's queries name
        # the limit as a filter (``limit_name || ''``), so no planner reads a key's queue through
        # duro_slots_queue, the whole limit's, in order (before statistics exist, PostgreSQL did:
        # 100,000 waiters read to find one key's)
        Index(
            "duro_slots_key_queue",
            "limit_key",
            "pos",
            "limit_name",
            **_where("state = 'waiting' AND limit_key IS NOT NULL"),
        ),
    )
    id: str = Field(primary_key=True, max_length=220)
    limit_name: str = Field(max_length=64)
    run_id: str | None = Field(default=None, max_length=200, nullable=True)
    state: str = Field(max_length=16)
    pos: int = _ms(nullable=False)
    label: str | None = Field(default=None, max_length=200, nullable=True)
    enqueued_at: int = _ms(nullable=False)
    timeout_at: int | None = _ms(nullable=True)
    reserved_until: int | None = _ms(nullable=True)
    granted_at: int | None = _ms(nullable=True)
    held_since: int | None = _ms(nullable=True)
    max_hold_ms: int | None = _ms(nullable=True)
    expires_at: int | None = _ms(nullable=True)
    ended_at: int | None = _ms(nullable=True)
    reason: str | None = Field(default=None, max_length=32, nullable=True)
    limit_key: str | None = Field(default=None, max_length=200, nullable=True)  # a keyed limit's key
    due_at: int | None = _ms(nullable=True)


class RateRow(DuroTable, table=True):
    """A rate as declared (what a client engine lists) and its operators' override and pause
    (schema version 10). The config file declares rates; this row exists once a rate is used."""

    __tablename__ = "duro_rates"
    name: str = Field(primary_key=True, max_length=64)
    rate_limit: int | None = Field(default=None, nullable=True)  # as declared
    per_ms: int | None = _ms(nullable=True)
    per_key: bool = Field(default=False)
    limit_override: int | None = Field(default=None, nullable=True)
    paused_until: int | None = _ms(nullable=True)  # the whole rate, every key
    next_pos: int = _ms(nullable=False, default=0)  # unused: each queue numbers its own waiters
    updated_at: int = _ms(nullable=False)


class RateKeyRow(DuroTable, table=True):
    """One queue of a rate (schema version 10): a key of a keyed rate, or ``''`` for an unkeyed
    one. Its row is locked by every decision of that queue; ``next_due`` is when its head may be
    granted (NULL: nobody waits, or the head's cost is above the limit in effect), so that a worker
    keeps one timer, the earliest ``next_due`` of the rates it declares."""

    __tablename__ = "duro_rate_keys"
    __table_args__ = (Index("duro_rate_keys_due", "next_due", **_where("next_due IS NOT NULL")),)
    rate_name: str = Field(primary_key=True, max_length=64)
    rate_key: str = Field(primary_key=True, max_length=200)
    paused_until: int | None = _ms(nullable=True)  # this key only (a 429 for one tenant)
    waiting: int = Field(default=0)
    next_due: int | None = _ms(nullable=True)
    updated_at: int = _ms(nullable=False)  # its last decision's instant: the next is never earlier
    next_pos: int = _ms(nullable=False, default=0)  # the place of its next waiter (schema version 11)
    granted_cum: int = _ms(nullable=False, default=0)  # the costs it ever granted (schema version 11)


class RateWait(DuroTable, table=True):
    """One ``acquire_rate`` (schema version 10): ``waiting`` in its queue (``pos`` orders it), then
    ``granted`` (``granted_at``: what the windows count), ``timed_out``, or ``left`` (its run ended
    or was cancelled while it waited); ``ended_at`` when it stopped waiting, whichever way."""

    __tablename__ = "duro_rate_waits"
    __table_args__ = (
        # a queue's waiters, and a queue's grants by instant: key first, the rate a filter (the
        # lesson of duro_slots_key_queue: no plan reads a queue through another one's index)
        Index("duro_rate_waits_queue", "rate_key", "pos", "rate_name", **_where("state = 'waiting'")),
        Index(
            "duro_rate_waits_granted",
            "rate_key",
            "granted_at",
            "cum",
            "rate_name",
            **_where("state = 'granted'"),
        ),
        Index(
            "duro_rate_waits_timeout",
            "timeout_at",
            **_where("state = 'waiting' AND timeout_at IS NOT NULL"),
        ),
        Index("duro_rate_waits_run", "run_id", **_where("state = 'waiting'")),
        # a rate's ended waits by their end (schema version 11): its window's grants for operators,
        # and the prune of those past every window
        Index("duro_rate_waits_ended", "rate_name", "ended_at", **_where("state <> 'waiting'")),
    )
    id: str = Field(primary_key=True, max_length=220)
    rate_name: str = Field(max_length=64)
    rate_key: str = Field(max_length=200)
    run_id: str | None = Field(default=None, max_length=200, nullable=True)
    cost: int
    pos: int = _ms(nullable=False)
    state: str = Field(max_length=16)
    enqueued_at: int = _ms(nullable=False)
    timeout_at: int | None = _ms(nullable=True)
    granted_at: int | None = _ms(nullable=True)
    ended_at: int | None = _ms(nullable=True)
    # a grant: its queue's granted_cum with it (schema version 11), so that the costs in a window
    # are one lookup (the queue's total less what it had granted before the window's first grant)
    cum: int | None = _ms(nullable=True)


metadata = DuroTable.metadata


def _table(model: type[DuroTable]) -> Table:
    name = model.__tablename__  # typed str or a function of the class; every duro table sets a str
    assert isinstance(name, str)
    return metadata.tables[name]


runs = _table(Run)
steps = _table(Step)
attempts = _table(Attempt)
past_steps = _table(PastStep)
signals = _table(Signal)
workers = _table(Worker)
meta = _table(Meta)
schedules = _table(Schedule)
limits = _table(LimitRow)
limit_keys = _table(LimitKeyRow)
slots = _table(SlotRequest)
rates = _table(RateRow)
rate_keys = _table(RateKeyRow)
rate_waits = _table(RateWait)


def partial_on_postgresql() -> None:
    """Give each partial index its condition on PostgreSQL too (see :func:`_where`); idempotent."""
    for table in metadata.tables.values():
        for index in table.indexes:
            where = index.dialect_options["sqlite"]["where"]
            if where is not None:
                index.dialect_options["postgresql"]["where"] = where
