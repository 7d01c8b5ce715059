"""Workers: their rows are their leases (a heartbeat renews one); leaving hands their runs back."""

from __future__ import annotations

from typing import Any

from ._connection import Connector
from ._queries import WORKER_COLUMNS


class Workers:
    def __init__(self, db: Connector) -> None:
        self.db = db

    def register(self, worker_id: str, namespace: str, host: str, pid: int, now: int) -> None:
        db = self.db
        with db.write() as conn:
            now = db.now(conn, now)
            db.run(conn, "delete_worker", {"id": worker_id}).fetchall()
            handed_back = db.run(conn, "hand_back_dead", {"id": worker_id}).rowcount  # its last life
            db.run(
                conn,
                "insert_worker",
                {"id": worker_id, "namespace": namespace, "host": host, "pid": pid, "now": now},
            )
            if handed_back:
                db.notify(conn, ["run", namespace])

    def heartbeat(self, worker_id: str, now: int) -> dict[str, int] | None:
        db = self.db
        with db.write() as conn:
            row = db.run(conn, "beat", {"id": worker_id, "now": db.now(conn, now)}).fetchone()
            if row is None:
                return None
            return dict(db.run(conn, "stamps", {"namespace": row[0]}).fetchall())

    def remove(self, worker_id: str, now: int, dead: bool = False) -> None:
        db = self.db
        with db.write() as conn:
            found = db.run(conn, "delete_worker", {"id": worker_id}).fetchone()
            if db.run(conn, "hand_back_dead" if dead else "hand_back", {"id": worker_id}).rowcount:
                db.notify(conn, ["run", None if found is None else found[0]])

    def all(self) -> list[dict[str, Any]]:
        db = self.db
        with db.read() as conn:
            now = db.now(conn, 0) if db.database_clock else None
            owned = dict(db.run(conn, "owned_runs", {}).fetchall())
            rows = db.run(conn, "list_workers", {}).fetchall()
        return [
            {**dict(zip(WORKER_COLUMNS, row, strict=True)), "db_now": now, "runs": owned.get(row[0], 0)}
            for row in rows
        ]

    def local(self, host: str) -> list[tuple[str, int]]:
        with self.db.read() as conn:
            return [(worker_id, pid) for worker_id, pid in self.db.run(conn, "local_workers", {"host": host})]
