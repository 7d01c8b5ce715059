"""Finished runs by their end: retention deletes them with their steps, signals and ended slots, a
bounded batch per transaction (see ``RETENTION_QUERIES`` for what a batch takes and what it keeps),
and replay-check reads those that ended since a moment."""

from __future__ import annotations

from typing import Any

from ._connection import StorePart
from ._records import Prune, PruneBatch, RunRecord
from ._runs import to_run

PRUNE_LOCK = "duro:prune:"  # + namespace: on PostgreSQL one pruner of a namespace at a time


def _last(found: list[Any]) -> tuple[int, str]:
    """Where the next batch starts: the (ended_at, id) of the last candidate read."""
    run_id, ended_at = found[-1]
    return int(ended_at), run_id


class RetentionRows(StorePart):
    """Deleting finished runs past a cutoff."""

    def prune_runs(self, prune: Prune) -> PruneBatch | None:
        """One batch in one transaction; ``None`` when another worker is pruning the namespace and
        ``prune.wait`` is false (PostgreSQL)."""
        params = {
            "namespace": prune.namespace,
            "cutoff": prune.cutoff,
            "after_at": prune.after[0],
            "after_id": prune.after[1],
            "n": prune.n,
        }
        if prune.dry_run:
            with self.db.read() as conn:
                found = self.db.run(conn, "prune_candidates", params).fetchall()
                if not found:
                    return PruneBatch(0, 0, 0, None)
                ids = {"ids": [run_id for run_id, _ in found]}
                steps = int(self.db.run_in(conn, "prune_count_steps", ids).fetchone()[0])
                slots = int(self.db.run_in(conn, "prune_count_slots", ids).fetchone()[0])
            return PruneBatch(len(found), steps, slots, _last(found))
        with self.db.write() as conn:
            key = PRUNE_LOCK + prune.namespace
            if prune.wait:
                self.db.lock_key(conn, key)
            elif self.db.dialect == "postgresql":
                if not self.db.run(conn, "prune_try_lock", {"key": key}).fetchone()[0]:
                    return None
            found = self.db.run(conn, "prune_candidates", params).fetchall()
            if not found:
                return PruneBatch(0, 0, 0, None)
            gone = [row[0] for row in self.db.run_in(conn, "prune_runs", {"ids": [r[0] for r in found]})]
            if not gone:
                return PruneBatch(0, 0, 0, _last(found))
            ids = {"ids": gone}
            slots = self.db.run_in(conn, "prune_slots", ids).rowcount
            steps = self.db.run_in(conn, "prune_steps", ids).rowcount
            steps += self.db.run_in(conn, "prune_past_steps", ids).rowcount
            self.db.run_in(conn, "prune_attempts", ids)
            self.db.run_in(conn, "prune_signals", ids)
        return PruneBatch(len(gone), steps, slots, _last(found))

    def finished_since(self, since: int, after: tuple[int, str] | None, n: int) -> list[RunRecord]:
        """Up to ``n`` finished runs (every namespace) that ended at or after ``since``, oldest end
        first, after ``after`` (the (ended_at, id) of the last run of the page before)."""
        # the first page from ``since`` itself: PostgreSQL starts an index scan at the keyset's bound,
        # so a bound before ``since`` would walk every run that ended before it (10 million: 0.3 s)
        at, run_id = after if after is not None else (since, "")
        params = {"since": since, "after_at": at, "after_id": run_id, "n": n}
        with self.db.read(transaction=False) as conn:
            return [to_run(row) for row in self.db.run(conn, "finished_since", params)]

    def next_prune_due(self, namespace: str, cutoff: int) -> int | None:
        """The earliest end, not before ``cutoff``, of a finished run of ``namespace``: when a retention
        of (now - cutoff) next has a run to delete."""
        with self.db.read(transaction=False) as conn:
            row = self.db.run(conn, "next_prune_due", {"namespace": namespace, "cutoff": cutoff}).fetchone()
        return None if row is None or row[0] is None else int(row[0])
