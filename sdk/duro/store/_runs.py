"""Runs: a start (its quota and its parent's step decided with it), reads, claims, cancellation,
retention (finished runs deleted by their end, a bounded batch a transaction) and re-driving (a
retry moves the run's calls from its resume point aside; a fork copies the original's first calls).

Where a retry resumes and where a fork cuts are pure decisions (``duro.rules._resume``); the claim's rule
is ``_queries.claim_sql``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from .._errors import ConcurrencyLimitError, DuroError, RunIdConflictError, RunNotFoundError, RunStatusError
from .._states import RETRYABLE, UNFINISHED
from ..rules._quota import admit
from ..rules._resume import Grant, attempt_of, fork_cut, rate_wait, resume_point, slot_id
from . import _psycopg
from ._commands import OwnStep
from ._connection import Connector, to_run
from ._notify import CancelNotice, DoneNotice, RunNotice, wire
from ._queries import RUN_COLUMNS, claim_sql, count_sql, list_runs_sql, next_due_sql, recent_durations_sql
from ._records import (
    AttemptRecord,
    CancelOutcome,
    Claim,
    Fenced,
    Fork,
    NewRun,
    Prune,
    PruneBatch,
    QuotaCheck,
    Redriven,
    Retry,
    RunRecord,
    StepRecord,
    reads,
    settle_sleeps,
)
from ._tables import ACTIVE_SQL


class _RunExists(Exception):
    """A start's insert found its run id taken by another process's start (see Runs.insert)."""


def _same_workflow(existing: RunRecord, new: NewRun) -> RunRecord:
    """The run a start's id names, which is that start's run only if it is of the same workflow."""
    if existing.workflow != new.workflow:
        raise RunIdConflictError(new.id, new.workflow, existing.workflow)
    return existing


def _new_run(new: NewRun) -> tuple[RunRecord, dict[str, Any]]:
    """The run a start creates, and its row's values (its record's, the tags as JSON)."""
    run = RunRecord(
        id=new.id,
        namespace=new.namespace,
        workflow=new.workflow,
        version=new.version,
        status="running" if new.owner else "pending",
        input=new.input,
        output=None,
        error=None,
        tags=list(new.tags),
        concurrency_key=new.concurrency_key,
        parent_id=new.parent_id,
        parent_seq=new.parent_seq,
        owner=new.owner,
        wake_at=None,
        created_at=new.created_at,
        updated_at=new.created_at,
        ended_at=None,
        trace_context=new.trace_context,
    )
    values = dict(zip(RUN_COLUMNS, run[:-1], strict=True))  # fresh, the last field, is not a column
    values["tags"] = json.dumps(new.tags)
    return run, values


def send_count(
    db: Connector, conn: Connection, key: str, statuses: Sequence[str], namespace: str | None
) -> Any:
    """A quota's count (the runs of ``key`` in ``statuses``), its cursor not read yet (in a
    pipeline, say): a start's, a retry's and a fork's."""
    params = {"key": key} if namespace is None else {"key": key, "namespace": namespace}
    return db.run_text(conn, count_sql(tuple(statuses), namespace is not None), params)


def _admit(quota: QuotaCheck, active: int) -> None:
    if not admit(quota.key, quota.limit, active).admitted:
        raise ConcurrencyLimitError(quota.workflow, quota.key, quota.limit, active)


# One GROUP BY over the namespace's unfinished runs, whose condition repeats the partial indexes'
# term for term: on SQLite a range of ``duro_runs_claim (namespace, status, owner)`` (one range per
# active status), on PostgreSQL ``duro_runs_active (namespace, created_at, id) WHERE status IN
# (active)``. Either way it reads the unfinished runs only, never a finished one; the workflow and
# version come from the table rows (no index holds them: the count is over in-flight runs, which a
# worker bounds, so covering them is not worth a wider index on every write).
UNFINISHED_BY_VERSION = (
    "SELECT workflow, version, count(*) FROM duro_runs "
    f"WHERE namespace = :namespace AND status IN {ACTIVE_SQL} "
    "GROUP BY workflow, version"
)

PRUNE_LOCK = "duro:prune:"  # + namespace: on PostgreSQL one pruner of a namespace at a time


def _last(found: list[Any]) -> tuple[int, str]:
    """Where the next batch starts: the (ended_at, id) of the last candidate read."""
    run_id, ended_at = found[-1]
    return int(ended_at), run_id


def _claimed(run: RunRecord, was: str) -> RunRecord:
    """A claimed run, ``fresh`` (no history to read) when it was ``pending`` from its start: a run
    pending again after a retry, or a fork, has the history it keeps."""
    if was == "pending" and run.attempt == 1 and run.forked_from is None:
        return run._replace(fresh=True)
    return run


def _raised_at(error: str | None) -> int | None:
    """The seq of the durable call a run's error names (``call_seq``, see ``duro._errors.raised_at``)."""
    try:
        found = json.loads(error or "{}").get("call_seq")
    except (ValueError, AttributeError):
        return None
    return found if isinstance(found, int) and not isinstance(found, bool) else None


class Runs:
    """Runs: starts, reads, quota counts, claims, cancellation, recoveries, retention, retries and
    forks."""

    def __init__(self, db: Connector) -> None:
        self.db = db

    # -- starts, reads and cancellation ----------------------------------------------------

    @reads
    def count_active(self, key: str, statuses: Sequence[str], namespace: str | None) -> int:
        """How many runs tagged ``concurrency:<key>`` are in ``statuses`` (a quota's count)."""
        with self.db.read() as conn:
            return int(send_count(self.db, conn, key, statuses, namespace).fetchone()[0])

    @reads
    def recent_durations(self, key: str, namespace: str | None, n: int = 20) -> list[int]:
        """How long (ms, creation to end) the last ``n`` completed runs tagged ``concurrency:<key>``
        lasted, latest end first (within ``namespace`` when set): one bounded index walk, made only
        when a start is refused (its ``retry_after`` estimate)."""
        params: dict[str, Any] = {"key": key, "n": n}
        if namespace is not None:
            params["namespace"] = namespace
        with self.db.read() as conn:
            rows = self.db.run_text(conn, recent_durations_sql(namespace is not None), params)
            return [int(row[0]) for row in rows]

    def insert(
        self, new: NewRun, quota: QuotaCheck | None, parent: OwnStep | None = None
    ) -> tuple[RunRecord, bool]:
        """Insert ``new`` unless its id exists; returns (run, created). Raises ConcurrencyLimitError,
        and RunIdConflictError when the id is a run of another workflow (nothing written).

        The existing-run check, the quota count and the insert are one atomic decision. ``parent``,
        the starting run's step, is written in the same transaction (fenced like ``RecordStep``;
        its run ``blocked`` when the step waits)."""
        try:
            if self.db.dialect == "postgresql" and parent is None:
                return self._insert_run_pipelined(new, quota)
            return self._insert_run(new, quota, parent)
        except (IntegrityError, _psycopg.driver.errors.UniqueViolation, _RunExists):
            # The id is taken: by an earlier start (on PostgreSQL without a quota the insert is the
            # existence check), or by another process's start between our check and our insert.
            existing = self.get(new.id)
            if existing is None:
                raise
            return _same_workflow(existing, new), False

    def _insert_run(
        self, new: NewRun, quota: QuotaCheck | None, parent: OwnStep | None
    ) -> tuple[RunRecord, bool]:
        db = self.db
        with db.write() as conn:
            if quota is not None:
                db.lock_key(conn, f"duro:quota:{quota.key}")
            row = db.run(conn, "select_run", {"id": new.id}).fetchone()
            if row is not None:
                existing = _same_workflow(to_run(row), new)  # or nothing is written, a parent's step neither
                if parent is not None:
                    db.write_step(conn, parent.run_id, parent.owner, parent.step, None, None, new.created_at)
                return existing, False
            if quota is not None:
                counted = send_count(db, conn, quota.key, quota.statuses, quota.namespace)
                _admit(quota, int(counted.fetchone()[0]))
            run, values = _new_run(new)
            db.run(conn, "insert_run", values)
            if new.owner is None:
                db.notify(conn, {"kind": "run", "namespace": new.namespace})
            if parent is not None and not db.write_step(
                conn,
                parent.run_id,
                parent.owner,
                parent.step,
                "blocked" if parent.step.status == "waiting" else None,
                None,
                new.created_at,
            ):
                conn.rollback()
                raise Fenced(parent.run_id)
            return run, True

    def _insert_run_pipelined(self, new: NewRun, quota: QuotaCheck | None) -> tuple[RunRecord, bool]:
        """PostgreSQL, a start with no parent step, in one round trip, or two with a quota: the
        reads a quota needs (the key's lock, the existing run, the count) in one pipeline; then one
        statement inserts the run and, if it did, announces it, sent with the commit. Without a quota
        that statement is the whole transaction, and the insert is also the existence check: it
        does nothing on an id already taken (by an earlier start, or one of another process past
        our check: no lock covers a run id), and the start returns that run."""
        db = self.db
        run, values = _new_run(new)
        if quota is None:
            with db.single_write() as conn:
                inserted = self._send_new(conn, new, values)
        else:
            with db.write() as conn:
                with db.pipeline(conn):
                    db.lock_key(conn, f"duro:quota:{quota.key}")
                    found = db.run(conn, "select_run", {"id": new.id})
                    counted = send_count(db, conn, quota.key, quota.statuses, quota.namespace)
                row = found.fetchone()
                if row is not None:
                    return _same_workflow(to_run(row), new), False
                _admit(quota, int(counted.fetchone()[0]))
                with db.committing(conn):  # the insert decides alone: it goes with the commit
                    inserted = self._send_new(conn, new, values)
        if inserted.rowcount != 1:
            raise _RunExists(new.id)
        return run, True

    def _send_new(self, conn: Connection, new: NewRun, values: dict[str, Any]) -> Any:
        """The insert of a new run, doing nothing on an id taken; announced if it is to be claimed."""
        if new.owner is None:
            notice = wire({"kind": "run", "namespace": new.namespace})
            return self.db.run(conn, "insert_run_announced", {**values, "notice": notice})
        return self.db.run(conn, "insert_run_new", values)

    @reads
    def get(self, run_id: str, namespace: str | None = None) -> RunRecord | None:
        """The run, or ``None`` (also when it is in another namespace than ``namespace``, if given)."""
        with self.db.single_read() as conn:
            row = self.db.run(conn, "select_run", {"id": run_id}).fetchone()
        if row is None:
            return None
        record = to_run(row)
        return record if namespace is None or record.namespace == namespace else None

    @reads
    def page(
        self,
        namespace: str | None,
        workflow: str | None,
        statuses: Sequence[str] | None,
        tag: str | None,
        limit: int,
        before: tuple[int, str] | None = None,
    ) -> list[RunRecord]:
        """Runs, newest first; ``before`` = (created_at, id) of the previous page's last run."""
        params: dict[str, Any] = {"limit": limit}
        if namespace is not None:
            params["namespace"] = namespace
        if workflow is not None:
            params["workflow"] = workflow
        unfinished_only = False
        if statuses:
            params["statuses"] = list(statuses)
            # the partial index of unfinished runs serves a list of unfinished runs only, named as
            # its condition is (a planner matches it term for term)
            unfinished_only = set(statuses) <= set(UNFINISHED)
        if tag is not None:
            if tag.startswith("concurrency:"):
                params["key"] = tag.removeprefix("concurrency:")
            else:
                params["tag"] = f"%{json.dumps(tag)}%"
        if before is not None:
            params["before_at"], params["before_id"] = before
            params["before"] = True
        filters = tuple(
            name for name in ("namespace", "workflow", "statuses", "key", "tag", "before") if name in params
        ) + (("unfinished",) if unfinished_only else ())
        params.pop("before", None)
        with self.db.read() as conn:
            return [to_run(row) for row in self.db.run_text(conn, list_runs_sql(filters), params)]

    @reads
    def statuses(self, run_ids: Iterable[str]) -> dict[str, str]:
        """The status of each known run, in one query."""
        ids = list(run_ids)
        if not ids:
            return {}
        with self.db.read() as conn:
            return dict(self.db.run_in(conn, "run_statuses", {"ids": ids}).fetchall())

    def count_recovery(self, run_id: str, owner: str) -> int | None:
        """Count one more attempt at a run a dead worker left (``recoveries``, see
        ``duro.worker._recovery``) and return the count; ``None`` if the run is not ``owner``'s."""
        with self.db.single_write() as conn:
            row = self.db.run(conn, "count_recovery", {"id": run_id, "owner": owner}).fetchone()
            return None if row is None else int(row[0])

    def count_first_recovery(self, run_id: str, owner: str) -> bool:
        """Count the first attempt at a run a dead worker left, if no attempt was counted since that
        death (``recoveries`` at 0); whether it did (``False``: a later attempt, or not ``owner``'s)."""
        with self.db.single_write() as conn:
            return (
                self.db.run(conn, "count_first_recovery", {"id": run_id, "owner": owner}).fetchone()
                is not None
            )

    def clear_recoveries(self, run_id: str, owner: str) -> None:
        """The run, ``owner``'s, reached a wait after its worker died: its attempts count from 0 again
        (a death while it waits is not its doing, see ``duro.worker._recovery``)."""
        with self.db.single_write() as conn:
            self.db.run(conn, "clear_recoveries", {"id": run_id, "owner": owner})

    @reads
    def cancel_requested(self, run_ids: Iterable[str]) -> set[str]:
        """Which of these unfinished runs have a cancel request (a worker's poll pass)."""
        ids = list(run_ids)
        if not ids:
            return set()
        with self.db.read() as conn:
            return {row[0] for row in self.db.run_in(conn, "cancel_requested", {"ids": ids})}

    def cancel(self, run_id: str, namespace: str | None, error: str, now: int) -> CancelOutcome:
        """Cancel the run and its unfinished descendants: one that nobody holds and that never made a
        durable call ends ``cancelled`` now (with ``error``); any other unfinished one gets the
        request (``cancel_requested_at``), due at once, for its worker to deliver into its code."""
        db = self.db
        with db.write() as conn:
            if namespace is None:
                found = db.run(conn, "run_status", {"id": run_id}).fetchone()
            else:
                found = db.run(conn, "run_in_namespace", {"id": run_id, "namespace": namespace}).fetchone()
            if found is None:
                raise RunNotFoundError(run_id, namespace)
            outcome = CancelOutcome([], [])
            unowned: set[str] = set()  # namespaces with requested runs nobody holds: to claim
            frontier = [run_id]
            while frontier:
                current = frontier.pop()
                params = {"id": current, "error": error, "now": now}
                if db.run(conn, "cancel_unstarted", params).rowcount:
                    outcome.ended.append(current)
                elif (held := db.run(conn, "request_cancel", params).fetchone()) is not None:
                    outcome.requested.append(current)
                    if held[0] is None:
                        unowned.add(held[1])
                frontier.extend(row[0] for row in db.run(conn, "active_children", {"id": current}).fetchall())
            if run_id in outcome.ended:
                db.run(conn, "make_parent_due", {"id": run_id, "now": now})  # a parent waiting on it goes on
            db.notify(
                conn,
                *(DoneNotice(kind="done", run_id=ended, status="cancelled") for ended in outcome.ended),
                *(CancelNotice(kind="cancel", run_id=requested) for requested in outcome.requested),
                *(RunNotice(kind="run", namespace=name) for name in sorted(unowned)),
            )
            return outcome

    # -- claims ----------------------------------------------------------------------------

    def claim(self, claim: Claim) -> list[RunRecord]:
        """Delete the rows of ``claim.expired`` whose stamp is unchanged (see ``duro.rules._lease``:
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
                for worker, stamp in claim.expired:  # its runs go back, each due as it was
                    if db.run(conn, "expire_worker", {"id": worker, "stamp": stamp}).fetchall():
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
        workflow's pending run excepted, see :meth:`claim`), or ``None``: none is due ever."""
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

    # -- retention -------------------------------------------------------------------------

    def prune(self, prune: Prune) -> PruneBatch | None:
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

    @reads
    def finished_since(self, since: int, after: tuple[int, str] | None, n: int) -> list[RunRecord]:
        """Up to ``n`` finished runs (every namespace) that ended at or after ``since``, oldest end
        first, after ``after`` (the (ended_at, id) of the last run of the page before)."""
        # the first page from ``since`` itself: PostgreSQL starts an index scan at the keyset's bound,
        # so a bound before ``since`` would walk every run that ended before it (10 million: 0.3 s)
        at, run_id = after if after is not None else (since, "")
        params = {"since": since, "after_at": at, "after_id": run_id, "n": n}
        with self.db.read(transaction=False) as conn:
            return [to_run(row) for row in self.db.run(conn, "finished_since", params)]

    @reads
    def next_prune_due(self, namespace: str, cutoff: int) -> int | None:
        """The earliest end, not before ``cutoff``, of a finished run of ``namespace``: when a retention
        of (now - cutoff) next has a run to delete."""
        with self.db.read(transaction=False) as conn:
            row = self.db.run(conn, "next_prune_due", {"namespace": namespace, "cutoff": cutoff}).fetchone()
        return None if row is None or row[0] is None else int(row[0])

    # -- retries and forks -----------------------------------------------------------------

    def retry(self, retry: Retry) -> Redriven:
        """Retry a ``failed`` or ``cancelled`` run (see ``duro.rules._resume``). Raises ``RunNotFoundError``,
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
                db.notify(conn, {"kind": "run", "namespace": run.namespace})
            return Redriven(to_run(updated), resume.seq)

    def fork(self, fork: Fork) -> Redriven:
        """Start ``fork.new`` with a copy of the original's first calls (see ``duro.rules._resume.fork_cut``).
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
            db.notify(conn, {"kind": "run", "namespace": new.namespace})
            return Redriven(run, cut)

    @reads
    def attempts(self, run_id: str) -> list[AttemptRecord]:
        """The run's ended attempts that were retried, oldest first."""
        with self.db.single_read() as conn:
            return [AttemptRecord(*row) for row in self.db.run(conn, "select_attempts", {"run_id": run_id})]

    @reads
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
        if run.status not in RETRYABLE and not (completed and run.status == "completed"):
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

    # -- versions that coexist -------------------------------------------------------------

    @reads
    def unfinished_by_version(self, namespace: str) -> dict[tuple[str, str], int]:
        """``{(workflow, version): unfinished runs}`` of ``namespace`` (pending, running, suspended,
        blocked), in one query; a pair with no unfinished run is left out."""
        with self.db.single_read() as conn:
            rows = self.db.run_text(conn, UNFINISHED_BY_VERSION, {"namespace": namespace}).fetchall()
        return {(workflow, version): count for workflow, version, count in rows}
