"""Re-driving runs: a retry (the run's calls from its resume point moved aside, the run pending
again) and a fork (a new run with a copy of the original's first calls), each one transaction.
Where a retry resumes and where a fork cuts are pure decisions (``duro._resume``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy.engine import Connection

from .._errors import DuroError, RunNotFoundError, RunStatusError
from .._resume import Grant, attempt_of, fork_cut, rate_wait, resume_point, slot_id
from ._connection import StorePart
from ._records import AttemptRecord, Fork, Redriven, Retry, RunRecord, StepRecord, settle_sleeps
from ._runs import _admit, _new_run, send_count, to_run


class RedriveRows(StorePart):
    """Retries and forks of ended runs, and the earlier attempts' records."""

    def retry_run(self, retry: Retry) -> Redriven:
        """Retry a ``failed`` or ``cancelled`` run (see ``duro._resume``). Raises ``RunNotFoundError``,
        ``RunStatusError`` (not ended, completed, or changed since the caller read it: another retry
        won) and ``ConcurrencyLimitError``; nothing is written then.

        On PostgreSQL in two round trips (three when the kept calls hold grants): the reads (the
        quota's lock and count, the run, its steps and earlier attempts) and the guarded update in
        one pipeline, then the writes sent with the commit."""
        db = self.db
        quota = retry.quota
        params = {"id": retry.run_id, "attempt": retry.attempt, "version": retry.version, "now": retry.now}
        with db.write() as conn:
            with db.pipeline(conn):
                if quota is not None:
                    db.lock_key(conn, f"duro:quota:{quota.key}")
                    counted = send_count(db, conn, quota.key, quota.statuses, quota.namespace)
                found = db.run(conn, "select_run", {"id": retry.run_id})
                listed = db.run(conn, "select_steps", {"run_id": retry.run_id})
                earlier = db.run(conn, "select_attempts", {"run_id": retry.run_id})
                # the decision's guarded update, in the same trip: it takes the run only as the
                # caller read it (PostgreSQL: a concurrent retry waits here for our commit, then
                # finds the run changed); undone with the transaction if anything below refuses
                taken = db.run(conn, "retry_run", params)
            run = self._ended(found.fetchone(), retry.run_id, retry.namespace, "retry")
            updated = taken.fetchone()
            if run.attempt != retry.attempt or updated is None:
                raise RunStatusError(run.id, "pending", "retry", "another retry took it first")
            if quota is not None:
                _admit(quota, int(counted.fetchone()[0]))
            steps = settle_sleeps([StepRecord(*row) for row in listed.fetchall()], run)
            attempts = [AttemptRecord(*row) for row in earlier.fetchall()]
            grants = self._grants(conn, steps, retry.now)
            resume = resume_point(steps, lambda step: grants.get(step.seq), _raised_at(run.error))
            moved = [step for step in steps if step.seq >= resume.seq]
            slots = [found for step in moved if (found := slot_id(step)) is not None]
            with db.committing(conn, answers=False):  # decided: the writes go with the commit
                db.run(
                    conn,
                    "insert_attempt",
                    {
                        "run_id": run.id,
                        "attempt": run.attempt,
                        "status": run.status,
                        "error": run.error,
                        "ended_at": run.ended_at,
                        "resume_seq": resume.seq,
                        "version": retry.version,
                        "retried_at": retry.now,
                    },
                )
                for step in moved:
                    past = {"run_id": run.id, "attempt": attempt_of(step.seq, attempts), **step._asdict()}
                    db.run(conn, "insert_past_step", past)
                if moved:
                    db.run(conn, "drop_steps_from", {"run_id": run.id, "seq": resume.seq})
                if slots:
                    db.run_in(conn, "drop_ended_slots", {"ids": slots})  # asked for again, same id
                db.run(conn, "give_back_signals", {"run_id": run.id, "seq": resume.seq})
                db.notify(conn, ["run", run.namespace])
            return Redriven(to_run(updated), resume.seq)

    def fork_run(self, fork: Fork) -> Redriven:
        """Start ``fork.new`` with a copy of the original's first calls (see ``duro._resume.fork_cut``).
        Raises ``RunNotFoundError``, ``RunStatusError`` (the original has not ended),
        ``RunIdConflictError`` (the new id is taken) and ``ConcurrencyLimitError``."""
        db = self.db
        new = fork.new
        with db.write() as conn:
            quota = fork.quota
            if quota is not None:
                db.lock_key(conn, f"duro:quota:{quota.key}")
            found = db.run(conn, "select_run", {"id": fork.run_id}).fetchone()
            # the original as the engine found it in its read scope: any namespace here
            original = self._ended(found, fork.run_id, None, "fork", completed=True)
            if db.run(conn, "select_run", {"id": new.id}).fetchone() is not None:
                raise DuroError(
                    f"cannot fork run {fork.run_id!r} as run {new.id!r}: that id is taken; "
                    f"pass another new_run_id, or none for a new one"
                )
            if quota is not None:
                counted = send_count(db, conn, quota.key, quota.statuses, quota.namespace)
                _admit(quota, int(counted.fetchone()[0]))
            steps = settle_sleeps(
                [StepRecord(*row) for row in db.run(conn, "select_steps", {"run_id": fork.run_id})], original
            )
            cut = fork_cut(steps, fork.from_seq)
            run, values = _new_run(new)
            run = run._replace(forked_from=fork.run_id, forked_seq=fork.from_seq)
            values.update(forked_from=fork.run_id, forked_seq=fork.from_seq)
            db.run(conn, "insert_run", values)
            if cut:
                db.run(conn, "copy_steps", {"new_id": new.id, "run_id": fork.run_id, "cut": cut})
            db.notify(conn, ["run", new.namespace])
            return Redriven(run, cut)

    def get_attempts(self, run_id: str) -> list[AttemptRecord]:
        """The run's ended attempts that were retried, oldest first."""
        with self.db.single_read() as conn:
            return [AttemptRecord(*row) for row in self.db.run(conn, "select_attempts", {"run_id": run_id})]

    def get_past_steps(self, run_id: str) -> list[tuple[int, StepRecord]]:
        """The calls earlier attempts made and a retry made again: (attempt, step), by seq."""
        with self.db.single_read() as conn:
            rows = self.db.run(conn, "select_past_steps", {"run_id": run_id}).fetchall()
        return [(int(row[0]), StepRecord(*row[1:])) for row in rows]

    def ended_between(
        self, namespace: str, since: int, until: int, after: tuple[int, str], n: int
    ) -> list[RunRecord]:
        """Up to ``n`` runs of ``namespace`` that ended in [since, until), oldest end first, after
        ``after`` (the (ended_at, id) of the last run of the page before)."""
        at, run_id = after if after > (since, "") else (since, "")
        params = {
            "namespace": namespace,
            "since": since,
            "until": until,
            "after_at": at,
            "after_id": run_id,
            "n": n,
        }
        with self.db.read(transaction=False) as conn:
            return [to_run(row) for row in self.db.run(conn, "ended_between", params)]

    def _ended(
        self, found: Any, run_id: str, namespace: str | None, action: str, completed: bool = False
    ) -> RunRecord:
        """The run of row ``found``, if it is in ``namespace`` and has ended as ``action`` needs."""
        run = None if found is None else to_run(found)
        if run is None or (namespace is not None and run.namespace != namespace):
            raise RunNotFoundError(run_id, namespace)
        if run.status not in ("failed", "cancelled") and not (completed and run.status == "completed"):
            raise RunStatusError(run.id, run.status, action)
        return run

    def _grants(self, conn: Connection, steps: Sequence[StepRecord], now: int) -> dict[int, Grant]:
        """The kept grants' states, by their hook step's seq: a slot held while it is busy, a rate's
        grant while its window has not passed it."""
        hooks = [step for step in steps if step.kind == "hook" and step.status == "completed"]
        slots = {found: step.seq for step in hooks if (found := slot_id(step)) is not None}
        waits = {wait[0]: step.seq for step in hooks if (wait := rate_wait(step)) is not None}
        # not held unless its row says so (a row gone, pruned say, holds nothing)
        grants = {seq: Grant(seq, False) for seq in (*slots.values(), *waits.values())}
        if slots:
            for slot, state in self.db.run_in(conn, "slot_states", {"ids": list(slots)}):
                grants[slots[slot]] = Grant(slots[slot], state == "busy")
        if waits:
            for wait, granted_at, per_ms in self.db.run_in(conn, "rate_grants", {"ids": list(waits)}):
                held = granted_at is not None and per_ms is not None and granted_at + per_ms > now
                grants[waits[wait]] = Grant(waits[wait], held)
        return grants


def _raised_at(error: str | None) -> int | None:
    """The seq of the durable call a run's error names (``call_seq``, see ``duro._errors.raised_at``)."""
    try:
        found = json.loads(error or "{}").get("call_seq")
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, int) and not isinstance(found, bool) else None
