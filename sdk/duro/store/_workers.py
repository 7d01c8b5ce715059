"""Workers: their rows are their leases (a heartbeat renews one); leaving hands their runs back."""

from __future__ import annotations

from typing import Any

from ._connection import Connector
from ._queries import WORKER_COLUMNS
from ._records import reads


class Workers:
    """Workers: their rows, which are their leases."""

    def __init__(self, db: Connector) -> None:
        self.db = db

    def register(self, worker_id: str, namespace: str, host: str, pid: int, now: int) -> None:
        """Add (or renew) the worker's row; its heartbeat is the lease on the runs it owns. Runs a
        previous life of this id owned are handed back to be claimed."""
        db = self.db
        with db.write() as conn:
            now = db.now(conn, now)
            db.run(conn, "delete_worker", {"id": worker_id}).fetchall()
            # its last life
            handed_back = db.run(conn, "hand_back_dead", {"id": worker_id, "now": now}).rowcount
            db.run(
                conn,
                "insert_worker",
                {"id": worker_id, "namespace": namespace, "host": host, "pid": pid, "now": now},
            )
            if handed_back:
                db.notify(conn, {"kind": "run", "namespace": namespace})

    def heartbeat(self, worker_id: str, now: int) -> dict[str, int] | None:
        """Move the worker's heartbeat stamp forward (by at least 1). Returns the stamp of every
        worker of its namespace (its own included: what a :class:`duro.rules._lease.Watch` judges by), or
        ``None`` when its row is gone: a claim took its runs over, and its runs may be someone else's now."""
        db = self.db
        with db.write() as conn:
            row = db.run(conn, "beat", {"id": worker_id, "now": db.now(conn, now)}).fetchone()
            if row is None:
                return None
            return dict(db.run(conn, "stamps", {"namespace": row[0]}).fetchall())

    def remove(self, worker_id: str, now: int, dead: bool = False) -> None:
        """Delete the worker and hand its unfinished runs back (owner cleared) for others to claim.
        ``dead``: its process is gone, so each run it was executing counts a recovery (``recoveries``,
        in a row while the run's history has not grown), as for a worker whose lease a claim found expired."""
        db = self.db
        with db.write() as conn:
            found = db.run(conn, "delete_worker", {"id": worker_id}).fetchone()
            params = {"id": worker_id, "now": now}
            if db.run(conn, "hand_back_dead" if dead else "hand_back", params).rowcount:
                db.notify(conn, {"kind": "run", "namespace": None if found is None else found[0]})

    @reads
    def all(self) -> list[dict[str, Any]]:
        """Every registered worker with its heartbeat age in ms (on the decisions' clock) and how
        many unfinished runs it owns: what ``duro health`` shows."""
        db = self.db
        with db.read() as conn:
            now = db.now(conn, 0) if db.database_clock else None
            owned = dict(db.run(conn, "owned_runs", {}).fetchall())
            rows = db.run(conn, "list_workers", {}).fetchall()
        return [
            {**dict(zip(WORKER_COLUMNS, row, strict=True)), "db_now": now, "runs": owned.get(row[0], 0)}
            for row in rows
        ]

    @reads
    def local(self, host: str) -> list[tuple[str, int]]:
        """(worker id, pid) of the workers registered from ``host``."""
        with self.db.read() as conn:
            return [(worker_id, pid) for worker_id, pid in self.db.run(conn, "local_workers", {"host": host})]
