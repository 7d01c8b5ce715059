"""Schedules: persisted cron schedules; each window is claimed by one worker (``claim_schedule_window``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict

from ._connection import Connector
from ._records import ScheduleRecord, reads


class Schedules:
    """Schedules: their definitions, due windows and outcomes."""

    def __init__(self, db: Connector) -> None:
        self.db = db

    def put(self, schedule: ScheduleRecord) -> None:
        """Create the schedule, or replace its definition (keeping its last outcome)."""
        db = self.db
        values = asdict(schedule)
        with db.write() as conn:
            if db.run(conn, "update_schedule", values).rowcount == 0:
                db.run(
                    conn,
                    "insert_schedule",
                    {**values, "last_fire_at": None, "last_run_id": None, "last_error": None},
                )
            db.notify(conn, {"kind": "sched", "namespace": schedule.namespace})

    @reads
    def all(self, namespace: str) -> list[ScheduleRecord]:
        """The namespace's schedules, by name."""
        with self.db.read() as conn:
            return [
                ScheduleRecord(*row) for row in self.db.run(conn, "list_schedules", {"namespace": namespace})
            ]

    def delete(self, namespace: str, name: str) -> bool:
        """Delete the schedule; False when there was none."""
        db = self.db
        with db.write() as conn:
            deleted: bool = (
                db.run(conn, "delete_schedule", {"namespace": namespace, "name": name}).rowcount == 1
            )
            db.notify(conn, {"kind": "sched", "namespace": namespace})
            return deleted

    @reads
    def due(self, namespace: str, workflows: Sequence[str], now: int) -> list[ScheduleRecord]:
        """Schedules of these workflows whose next window is due by ``now``."""
        params = {"namespace": namespace, "workflows": list(workflows), "now": now}
        with self.db.read() as conn:
            return [ScheduleRecord(*row) for row in self.db.run_in(conn, "due_schedules", params)]

    @reads
    def next_due(self, namespace: str, workflows: Sequence[str]) -> int | None:
        """The earliest next window of these workflows' schedules."""
        params = {"namespace": namespace, "workflows": list(workflows)}
        with self.db.read() as conn:
            due = self.db.run_in(conn, "next_schedule_due", params).fetchone()[0]
        return None if due is None else int(due)

    def claim_window(self, namespace: str, name: str, due: int, next_due: int, now: int) -> bool:
        """Move the schedule from window ``due`` to ``next_due``; False if another worker did first."""
        params = {"namespace": namespace, "name": name, "due": due, "next_due": next_due, "now": now}
        with self.db.write() as conn:
            claimed: int = self.db.run(conn, "claim_schedule_window", params).rowcount  # the rows updated
            return claimed == 1

    def record_outcome(
        self, namespace: str, name: str, fired_at: int, run_id: str | None, error: str | None
    ) -> None:
        """What the window fired at ``fired_at`` did: the run it started, or why it started none."""
        params = {
            "namespace": namespace,
            "name": name,
            "fired_at": fired_at,
            "run_id": run_id,
            "error": error,
        }
        with self.db.write() as conn:
            self.db.run(conn, "schedule_outcome", params)
