"""Signals: buffered for a run until a ``wait_for_signal`` of that name consumes one (``TakeSignal``).
A signal comes from outside any run (``send_signal``) or from another run's code (``SendSignal``)."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy.engine import Connection

from .._errors import RunEndedError, RunNotFoundError
from .._states import UNFINISHED
from ._commands import SendSignal, TakeSignal
from ._connection import Connector
from ._records import Fenced, StepRecord, reads


class Signals:
    """Signals: sent from outside a run or from a run, buffered, and taken by a run's wait."""

    def __init__(self, db: Connector) -> None:
        self.db = db

    def send(self, run_id: str, name: str, payload: str | None, now: int) -> None:
        """Buffer signal ``name`` for the run (an error if the run is unknown or finished)."""
        with self.db.write() as conn:
            self._deliver(conn, run_id, name, payload, now)

    def _deliver(self, conn: Connection, run_id: str, name: str, payload: str | None, now: int) -> None:
        db = self.db
        found = db.run(conn, "run_status", {"id": run_id}).fetchone()
        if found is None:
            raise RunNotFoundError(run_id)
        if found[0] not in UNFINISHED:
            raise RunEndedError(run_id, found[0], name)
        db.run(conn, "insert_signal", {"run_id": run_id, "name": name, "payload": payload, "now": now})
        db.run(conn, "make_due", {"id": run_id, "now": now})  # a run evicted while it waits is due
        db.notify(conn, {"kind": "signal", "run_id": run_id, "name": name})

    def send_from_run(self, conn: Connection, command: SendSignal) -> bool:
        """See :class:`SendSignal`."""
        db, step = self.db, command.step
        now = step.ended_at or step.started_at
        written = db.run(conn, "select_step", {"run_id": command.run_id, "seq": step.seq}).fetchone()
        if written is None:  # else this very command committed already: nothing is sent twice
            self._deliver(conn, command.target, command.name, command.payload, now)
        if not db.write_step(conn, command.run_id, command.owner, step, None, None, now):
            conn.rollback()
            raise Fenced(command.run_id)
        return True

    def take(self, conn: Connection, command: TakeSignal) -> StepRecord | None:
        """See :class:`TakeSignal`."""
        db, run_id, step = self.db, command.run_id, command.step
        row = db.run(conn, "next_signal", {"run_id": run_id, "name": command.name}).fetchone()
        if row is None:
            return None
        db.run(conn, "consume_signal", {"id": row[0], "seq": step.seq})
        taken = step._replace(status="completed", result=row[1])
        if not db.write_step(conn, run_id, command.owner, taken, "running", None, step.ended_at or 0):
            conn.rollback()
            raise Fenced(run_id)
        return taken

    @reads
    def signalled(self, run_ids: Iterable[str]) -> set[tuple[str, str]]:
        """(run id, signal name) of every unconsumed signal of these runs."""
        ids = list(run_ids)
        if not ids:
            return set()
        with self.db.read() as conn:
            return {(run_id, name) for run_id, name in self.db.run_in(conn, "signalled", {"ids": ids})}
