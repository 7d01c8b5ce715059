"""A run's progress: the typed commands (``apply``, ``apply_batch``), step records and the run's end.

Each command keeps its own fence (see :mod:`._rows`) and result, also inside a batch: a fenced
write changes nothing and does not disturb the others. A batch is applied in one transaction: on
PostgreSQL in one pipeline (one round trip), on SQLite as one ownership read and one
``executemany`` per kind of write.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeGuard, overload

from sqlalchemy.engine import Connection

from .._states import RunState
from ..rules._slots import SlotEvent
from ._commands import (
    Command,
    ConfirmSlot,
    Evict,
    FinishRun,
    GiveUpSlot,
    RecordStep,
    ReleaseSlot,
    RequestSlot,
    SendSignal,
    SlotCommand,
    SlotOutcome,
    TakeSignal,
)
from ._connection import Connector, due_for
from ._notify import DoneNotice, wire
from ._queries import QUERIES, upsert_steps_sql
from ._records import Fenced, StepRecord, reads

# per shape (see step_rows), the columns of a full row that shape keeps: the six required ones and
# its optional ones
_PICK_COLUMNS = [
    operator.itemgetter(*range(6), *(6 + bit for bit in range(5) if shape >> bit & 1)) for shape in range(32)
]


def step_rows(steps: Iterable[tuple[str, StepRecord]]) -> dict[int, list[tuple[Any, ...]]]:
    """Step records as positional rows grouped by which optional columns they fill (a bit each):
    binding a parameter costs about as much as SQLite's whole insert, and most are NULL."""
    rows: dict[int, list[tuple[Any, ...]]] = {}
    for run_id, step in steps:
        ended, wake, result, error, detail = step.ended_at, step.wake_at, step.result, step.error, step.detail
        shape = (
            (ended is not None)
            | (wake is not None) << 1
            | (result is not None) << 2
            | (error is not None) << 3
            | (detail is not None) << 4
        )
        row = (
            run_id,
            step.seq,
            step.kind,
            step.name,
            step.status,
            step.started_at,
            ended,
            wake,
            result,
            error,
            detail,
        )
        if shape in rows:
            rows[shape].append(_PICK_COLUMNS[shape](row))
        else:
            rows[shape] = [_PICK_COLUMNS[shape](row)]
    return rows


def _decides_alone(command: Command) -> bool:
    """A command of one statement, fenced in its own SQL (on PostgreSQL): a step record (see
    ``Connector.send_step``), or the end of a run that was not cancelled and has no parent to make due
    (a child's end is still announced, by the same statement)."""
    if type(command) is RecordStep:
        return True
    return type(command) is FinishRun and command.parent is None and command.status != "cancelled"


def _all_steps(commands: Sequence[Command]) -> TypeGuard[Sequence[RecordStep]]:
    return all(type(command) is RecordStep for command in commands)


class Steps:
    """A run's steps, and its progress writes: the typed commands. A signal's or a slot's command
    is applied by the part that owns it (handed in as the calls below, when the store is built), in
    the transaction this part opens."""

    def __init__(
        self,
        db: Connector,
        take_signal: Callable[[Connection, TakeSignal], StepRecord | None],
        send_signal: Callable[[Connection, SendSignal], bool],
        slot_command: Callable[[Connection, SlotCommand], SlotOutcome],
        tell_slots: Callable[[Sequence[SlotEvent]], None],
    ) -> None:
        self.db = db
        self._take_signal = take_signal
        self._send_signal = send_signal
        self._slot_command = slot_command
        self._tell_slots = tell_slots

    @reads
    def of(self, run_id: str) -> list[StepRecord]:
        """The run's steps in sequence order, as written (see ``settle_sleeps``)."""
        with self.db.single_read() as conn:
            return [StepRecord(*row) for row in self.db.run(conn, "select_steps", {"run_id": run_id})]

    @reads
    def page(self, run_id: str, after: int, limit: int) -> list[StepRecord]:
        """At most ``limit`` of the run's steps after sequence number ``after``, in order."""
        params = {"run_id": run_id, "after": after, "n": limit}
        with self.db.single_read() as conn:
            return [StepRecord(*row) for row in self.db.run(conn, "select_steps_after", params)]

    @reads
    def past(self, run_id: str) -> list[tuple[int, StepRecord]]:
        """The calls earlier attempts made and a retry made again: (attempt, step), by seq."""
        with self.db.single_read() as conn:
            rows = self.db.run(conn, "select_past_steps", {"run_id": run_id}).fetchall()
        return [(int(row[0]), StepRecord(*row[1:])) for row in rows]

    @overload
    def apply(self, command: RecordStep | FinishRun | SendSignal) -> bool: ...
    @overload
    def apply(self, command: TakeSignal) -> StepRecord | None: ...
    @overload
    def apply(self, command: SlotCommand) -> SlotOutcome: ...
    @overload
    def apply(self, command: Evict) -> list[str]: ...
    def apply(self, command: Command) -> bool | StepRecord | SlotOutcome | list[str] | None:
        """Apply one command in a transaction of its own (see :mod:`._commands` for each result)."""
        with self.db.write() as conn:
            result: bool | StepRecord | SlotOutcome | list[str] | None = self._apply_command(conn, command)
        if type(result) is SlotOutcome:
            self._tell_slots(result.events)
        return result

    def _apply_command(self, conn: Connection, command: Command) -> Any:
        match command:
            case RecordStep(run_id, owner, step, run_status, wake_at, now):
                return self.db.write_step(conn, run_id, owner, step, run_status, wake_at, now)
            case FinishRun():
                return self._finish_run(conn, command)
            case TakeSignal():
                return self._take_signal(conn, command)
            case SendSignal():
                return self._send_signal(conn, command)
            case RequestSlot() | ConfirmSlot() | GiveUpSlot() | ReleaseSlot():
                return self._slot_command(conn, command)
            case Evict():
                return self._evict(conn, command)

    def _evict(self, conn: Connection, command: Evict) -> list[str]:
        """See :class:`Evict`: one statement per run, by the kind of its wait (pipelined).

        On PostgreSQL the runs' rows are locked first, in a statement of their own: a transaction
        that ended what a run waits for and made it due (a child's end, a signal) holds the row, and
        the hand-back's check must read what that transaction committed. Checked in the same
        statement that waited for the row, it would read the snapshot taken before it waited, and
        overwrite that with "not due": an unowned run nobody would ever take up again."""
        sent = []
        if self.db.dialect == "postgresql":
            self.db.run_in(conn, "lock_runs", {"ids": sorted({wait.run_id for wait in command.waits})})
        with self.db.pipeline(conn):  # on PostgreSQL one round trip for all of them
            for wait in command.waits:
                params = {
                    "id": wait.run_id,
                    "owner": command.owner,
                    "key": wait.key,
                    "due_at": wait.due_at,
                    "now": command.now,
                }
                sent.append((wait.run_id, self.db.run(conn, f"evict_{wait.kind}", params)))
        return [run_id for run_id, cursor in sent if cursor.rowcount == 1]

    def apply_batch(self, commands: Sequence[Command]) -> list[Any]:
        """Apply commands of many runs (of the types in ``batches``: ``RecordStep``, ``FinishRun``; on
        SQLite also ``RequestSlot`` and ``ReleaseSlot``) in one transaction, each with its own fence
        and result, in order: a fenced command changes nothing and disturbs no other."""
        if self.db.dialect == "postgresql":
            results = self._apply_pipelined(commands)
        elif _all_steps(commands):
            results = self._apply_steps_sqlite(commands)
        else:
            results = self._apply_each(commands)
        for result in results:
            if type(result) is SlotOutcome:
                self._tell_slots(result.events)
        return results

    def _apply_each(self, commands: Sequence[Command]) -> list[Any]:
        with self.db.write() as conn:
            return [self._apply_command(conn, command) for command in commands]

    def _apply_pipelined(self, commands: Sequence[Command]) -> list[Any]:
        """PostgreSQL: every statement of the batch in one pipeline, one round trip in all instead
        of one per statement. Step records and the ends of top-level runs decide alone (each fenced
        in its own statement), so they go with the ``BEGIN`` and the ``COMMIT``: the batch is one
        round trip. An end that tells a parent, or closes a cancelled run's waits, is followed up
        by what its answer decides: then a fenced write (a worker that lost runs: rare) rolls the
        whole batch back, and the batch is applied again statement by statement."""
        if all(_decides_alone(command) for command in commands):
            db = self.db
            if len(commands) == 1:  # one statement: its own transaction
                with db.single_write() as conn:
                    return [self._send_alone(conn, commands[0]).rowcount == 1]
            with db.write() as conn, db.committing(conn):
                sent = [self._send_alone(conn, command) for command in commands]
            return [cursor.rowcount == 1 for cursor in sent]
        try:
            return self._send_batch(commands)
        except Fenced:
            return self._apply_each(commands)

    def _send_alone(self, conn: Connection, command: Command) -> Any:
        if type(command) is RecordStep:
            run_id, owner, step, status, wake_at, now = command
            return self.db.send_step(conn, run_id, owner, step, now, status, wake_at)
        assert type(command) is FinishRun
        return self._send_finish(conn, command, announced=True)

    def _send_batch(self, commands: Sequence[Command]) -> list[Any]:
        db = self.db
        with db.write() as conn:
            sent: list[tuple[Any, tuple[str, str] | None]] = []  # (fence's cursor, a finish's run and status)
            with db.pipeline(conn):
                for command in commands:
                    match command:
                        case RecordStep(run_id, owner, step, status, wake_at, now):
                            sent.append((db.send_step(conn, run_id, owner, step, now, status, wake_at), None))
                        case FinishRun():
                            sent.append((self._send_finish(conn, command), (command.run_id, command.status)))
                            if command.status == "cancelled":  # only if it did end (see the query)
                                db.run(conn, "close_open_steps", {"id": command.run_id, "now": command.now})
                            if command.parent is not None:
                                db.run(conn, "make_due", {"id": command.parent, "now": command.now})
                        case _:
                            raise TypeError(f"{type(command).__name__} is not batched on PostgreSQL")
            if any(cursor.rowcount != 1 for cursor, _ in sent):
                raise Fenced("a write of the batch")  # rolled back; each write is made again alone
            # a child's end is announced to its parent (see _finish)
            db.notify(
                conn,
                *(
                    DoneNotice(kind="done", run_id=end[0], status=end[1])
                    for cursor, end in sent
                    if end is not None and cursor.fetchone()[0] is not None
                ),
            )
        return [True] * len(commands)

    def _apply_steps_sqlite(self, commands: Sequence[RecordStep]) -> list[Any]:
        """Step records of many runs: one ownership read for the batch, then one ``executemany``
        for the runs and one for the steps. Under ``BEGIN IMMEDIATE`` nothing can change between the
        read and the writes. A run's last record decides its status and timer; a run whose status
        stays the same is updated without touching the status indexes."""
        final: dict[str, tuple[str | None, RunState | None, int | None, int]] = {}
        steps: dict[tuple[str, int], StepRecord] = {}  # a step written twice in the batch: its last record
        for command in commands:
            run_id, status, wake_at = command.run_id, command.run_status, command.wake_at
            if status is None and (previous := final.get(run_id)) is not None:
                status, wake_at = previous[1], previous[2]
            final[run_id] = (command.owner, status, wake_at, command.now)
            if command.step is not None:
                steps[run_id, command.step.seq] = command.step
        ids = list(final)
        db = self.db
        with db.write() as conn:
            stored: dict[str, str] = {}  # run id -> status, of the runs the writer still owns
            for chunk in range(0, len(ids), 500):
                for run_id, owner, status in db.run_in(conn, "owners", {"ids": ids[chunk : chunk + 500]}):
                    if final[run_id][0] == owner:
                        stored[run_id] = status
            moved, timed, touched = [], [], []
            for run_id, (_, status, wake_at, now) in final.items():
                was = stored.get(run_id)
                if was is None:
                    continue
                if status is None:
                    touched.append((now, run_id))
                elif status == was:
                    timed.append((now, wake_at, due_for(status, wake_at, now), run_id))
                else:
                    moved.append((now, status, wake_at, due_for(status, wake_at, now), run_id))
            for name, rows in (("move_run", moved), ("time_run", timed), ("touch_run", touched)):
                if rows:
                    db.run_many(conn, QUERIES[name], rows)
            shaped = step_rows((run_id, step) for (run_id, _), step in steps.items() if run_id in stored)
            for shape, rows in shaped.items():
                db.run_many(conn, upsert_steps_sql(shape), rows)
        return [command.run_id in stored for command in commands]

    def _send_finish(self, conn: Connection, command: FinishRun, announced: bool = False) -> Any:
        """End the run if its owner still owns it unfinished; the cursor's ``rowcount`` is 1 if it did
        (on PostgreSQL its row is the run's parent id). ``announced`` (PostgreSQL): a child's end is
        announced to its parent by the same statement."""
        run_id, owner, status, output, error, now, _ = command
        params = {
            "id": run_id,
            "owner": owner,
            "status": status,
            "output": output,
            "error": error,
            "now": now,
        }
        if not announced:
            return self.db.run(conn, "finish_run", params)
        params["notice"] = wire({"kind": "done", "run_id": run_id, "status": status})
        return self.db.run(conn, "finish_run_announced", params)

    def _finish_run(self, conn: Connection, command: FinishRun) -> bool:
        result = self._send_finish(conn, command)
        if result.rowcount != 1:
            return False
        if command.status == "cancelled":  # what it still waited on ends with it
            self.db.run(conn, "close_open_steps", {"id": command.run_id, "now": command.now})
        if command.parent is not None:  # the parent's wait for this run is over
            self.db.run(conn, "make_due", {"id": command.parent, "now": command.now})
        if self.db.dialect == "postgresql":
            # Only a parent waits on a run's end in another process (a client's result() polls):
            # NOTIFY serializes committing transactions, so a top-level run's end sends none.
            if result.fetchone()[0] is not None:
                self.db.notify(conn, {"kind": "done", "run_id": command.run_id, "status": command.status})
        return True
