"""Claims: a worker takes the runs it may execute, in one transaction (the rule is ``claim_sql``)."""

from __future__ import annotations

from typing import Any

from ._connection import StorePart
from ._queries import claim_sql, next_due_sql
from ._records import Claim, RunRecord
from ._runs import to_run


class ClaimRows(StorePart):
    """Claims: the runs a worker takes up, and when the next one falls due."""

    def claim_runs(self, claim: Claim) -> list[RunRecord]:
        """Delete the rows of ``claim.condemned`` whose stamp is unchanged (see ``duro._lease``:
        handing their runs back), then take up to ``claim.limit`` unowned unfinished runs that are
        due, in due order, in one transaction (the rule is ``_queries.claim_sql``). Serial workflows are locked by name first (PostgreSQL): two
        workers never start two runs of one serial workflow."""
        if not claim.workflows:
            return []
        db = self.db
        params = {
            "namespace": claim.namespace,
            "workflows": list(claim.workflows),
            "owner": claim.worker_id,
            "now": claim.now,
            "limit": claim.limit,
        }
        if claim.serial:
            params["serial"] = list(claim.serial)
        if claim.versions:
            params["versions"] = [tuple(pair) for pair in claim.versions]
        statements = claim_sql(db.dialect, bool(claim.serial), bool(claim.versions))
        with db.write() as conn:
            with db.pipeline(conn):  # on PostgreSQL all of it in one round trip
                for worker, stamp in claim.condemned:  # its runs go back, each due as it was
                    if db.run(conn, "condemn", {"id": worker, "stamp": stamp}).fetchall():
                        db.run(conn, "hand_back_dead", {"id": worker, "now": claim.now})
                if claim.orphans:
                    db.run(conn, "hand_back_orphans", {"now": claim.now})
                for name in sorted(claim.serial):
                    db.lock_key(conn, f"duro:serial:{claim.namespace}:{name}")
                taken = db.run_text(conn, statements[0], params)
            if len(statements) == 1:  # PostgreSQL: the claimed runs, each with its status before
                rows = taken.fetchall()
                return [_claimed(to_run(row[:-1]), row[-1]) for row in rows]
            was = dict(taken.fetchall())  # SQLite: the candidates, then the claim of their ids
            if not was:
                return []
            rows = db.run_text(conn, statements[1], {**params, "ids": list(was)}).fetchall()
            return [_claimed(to_run(row), was[row[0]]) for row in rows]

    def next_due(self, claim: Claim) -> int | None:
        """The earliest due time of a run ``claim`` could take (its namespace and workflows; a serial
        workflow's pending run excepted, see ``claim_runs``), or ``None``: none is due ever."""
        params: dict[str, Any] = {
            "namespace": claim.namespace,
            "workflows": list(claim.workflows),
            "serial": list(claim.serial),
        }
        if claim.versions:
            params["versions"] = [tuple(pair) for pair in claim.versions]
        with self.db.single_read() as conn:
            sql = next_due_sql(bool(claim.serial), bool(claim.versions))
            row = self.db.run_text(conn, sql, params).fetchone()
            return None if row is None or row[0] is None else int(row[0])


def _claimed(run: RunRecord, was: str) -> RunRecord:
    """A claimed run, ``fresh`` (no history to read) when it was ``pending`` from its start: a run
    pending again after a retry, or a fork, has the history it keeps."""
    if was == "pending" and run.attempt == 1 and run.forked_from is None:
        return run._replace(fresh=True)
    return run
