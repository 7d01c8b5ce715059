"""The rows the store's parts share: a step's and a slot's values as written, a slot's and a limit's
as read, and the fence every write of a run passes.

A run's writes are fenced on its owner and on its status not being terminal: a worker that lost a
run (cancelled, or taken over after its lease ran out) changes nothing. Each write touches the run
first (the fence); the caller learns from the fence's row count whether it still owns the run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Connection

from .._config import LimitConfig
from .._slots import LimitView, SlotRow
from .._states import RunState
from ._commands import OwnStep
from ._connection import Connector
from ._queries import SLOT_COLUMNS, STEP_COLUMNS
from ._records import StepRecord


def step_values(run_id: str, step: StepRecord) -> dict[str, Any]:
    return dict(zip(STEP_COLUMNS, (run_id, *step), strict=True))


WAITING_STATUSES = ("suspended", "blocked")


def due_for(status: str, wake_at: int | None, now: int) -> int | None:
    """When a run written with ``status`` (and timer ``wake_at``) at ``now`` falls due if nobody
    holds it: a waiting run when its timer ends (never, with no timer: what it waits for makes it
    due), any other at once (see ``_tables.Run.due_at``)."""
    return wake_at if status in WAITING_STATUSES else now


def send_fence(
    db: Connector,
    conn: Connection,
    run_id: str,
    owner: str | None,
    now: int,
    status: str | None = None,
    wake_at: int | None = None,
) -> Any:
    """Touch the run if ``owner`` still owns it unfinished (and set its status and timer); the
    cursor's ``rowcount`` is 1 if it did."""
    if status is None:
        return db.run(conn, "fence", {"id": run_id, "owner": owner, "now": now})
    return db.run(
        conn,
        "fence_status",
        {
            "id": run_id,
            "owner": owner,
            "now": now,
            "status": status,
            "wake_at": wake_at,
            "due_at": due_for(status, wake_at, now),
        },
    )


def write_step(
    db: Connector,
    conn: Connection,
    run_id: str,
    owner: str | None,
    step: StepRecord | None,
    run_status: RunState | None,
    wake_at: int | None,
    now: int,
) -> bool:
    """Record ``step`` (if any) and set the run's status and timer, if ``owner`` still owns it."""
    if step is not None and db.dialect == "postgresql":
        touched: int = send_step(db, conn, run_id, owner, step, now, run_status, wake_at).rowcount
        return touched == 1
    if send_fence(db, conn, run_id, owner, now, run_status, wake_at).rowcount != 1:
        return False
    if step is not None:
        db.run(conn, "upsert_step", step_values(run_id, step))
    return True


def send_step(
    db: Connector,
    conn: Connection,
    run_id: str,
    owner: str | None,
    step: StepRecord | None,
    now: int,
    run_status: RunState | None = None,
    wake_at: int | None = None,
) -> Any:
    """``write_step`` without waiting for the fence's answer (in a pipeline): the returned cursor's
    ``rowcount`` is 1 once the pipeline syncs if ``owner`` still owned the run. On PostgreSQL the
    fence is inside the step's write (one statement: a fenced one writes nothing); on SQLite the
    step is written whatever the fence says, and the caller rolls back when it is not 1."""
    if step is None:
        return send_fence(db, conn, run_id, owner, now, run_status, wake_at)
    if db.dialect == "postgresql":
        values = step_values(run_id, step)
        values.update(owner=owner, now=now)
        if run_status is None:
            return db.run(conn, "fenced_step", values)
        values.update(
            run_status=run_status, run_wake_at=wake_at, run_due_at=due_for(run_status, wake_at, now)
        )
        return db.run(conn, "fenced_step_status", values)
    fence = send_fence(db, conn, run_id, owner, now, run_status, wake_at)
    db.run(conn, "upsert_step", step_values(run_id, step))
    return fence


@dataclass(frozen=True)
class LimitState:
    """A limit's row: overrides and live counts (for the admin listing)."""

    name: str
    capacity_override: int | None
    max_hold_override_ms: int | None
    busy: int
    reserved: int
    waiting: int
    capacity: int | None = None  # as declared by the last worker to start with it in its config
    max_hold_ms: int | None = None
    per_key: int | None = None


def slot_row(values: Any) -> SlotRow:
    """A slot's row as selected (``SLOT_COLUMNS``: its fields, then ``due_at``, which it derives)."""
    return SlotRow(*values[:-1])


def slot_values(row: SlotRow) -> dict[str, Any]:
    return dict(zip(SLOT_COLUMNS, (*row, row.due_at), strict=True))


def limit_view(config: LimitConfig, row: Sequence[Any]) -> tuple[LimitView, int]:
    """A limit as its locked row (``limit_lock``) and its config say, and the instant to judge by."""
    capacity_override, max_hold_override, busy, reserved, waiting, next_pos, judged = row[:7]
    return LimitView(
        name=config.name,
        capacity=capacity_override or config.capacity,
        max_hold_ms=max_hold_override or config.max_hold_ms,
        busy=busy,
        reserved=reserved,
        waiting=waiting,
        next_pos=next_pos,
        per_key=config.per_key,
    ), int(judged)


def send_slot_read(
    db: Connector, conn: Connection, slot_id: str, hook: OwnStep | None, now: int
) -> Callable[[], tuple[SlotRow | None, int | None]]:
    """Send the slot's read and the hook's fence, after the limit's lock; the call returned gives
    the slot and how many runs the fence touched (``None`` without a hook) once they are in.
    On PostgreSQL the two are one statement: only holders of the limit's lock write its slots,
    so the read's snapshot cannot miss a change while the fence waits for the run's row."""
    if hook is not None and db.dialect == "postgresql":
        params = {"id": slot_id, "run_id": hook.run_id, "owner": hook.owner, "now": now}
        cursor = db.run(conn, "slot_select_fenced", params)

        def fenced() -> tuple[SlotRow | None, int | None]:
            touched, *values = cursor.fetchone()
            return (None if values[0] is None else slot_row(values)), int(touched)

        return fenced
    found = db.run(conn, "slot_select", {"id": slot_id})
    fence = None if hook is None else send_fence(db, conn, hook.run_id, hook.owner, now)

    def read() -> tuple[SlotRow | None, int | None]:
        slot = found.fetchone()
        return (None if slot is None else slot_row(slot)), (None if fence is None else fence.rowcount)

    return read
