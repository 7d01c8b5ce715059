"""Runs: a start (its quota and its parent's step decided with it), reads, and cancellation."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import IntegrityError

from .._definitions import ACTIVE_STATUS_VALUES
from .._errors import ConcurrencyLimitError, RunIdConflictError, RunNotFoundError
from .._quota import admit
from . import _psycopg
from ._commands import OwnStep
from ._connection import StorePart
from ._queries import RUN_COLUMNS, count_sql, list_runs_sql, recent_durations_sql
from ._records import CancelOutcome, Fenced, NewRun, QuotaCheck, RunRecord
from ._rows import write_step


class _RunExists(Exception):
    """A start's insert found its run id taken by another process's start (see RunRows.insert_run)."""


def to_run(row: Any) -> RunRecord:
    values = dict(zip(RUN_COLUMNS, row, strict=True))
    try:
        tags = json.loads(values["tags"] or "[]")
    except ValueError:
        tags = []  # a corrupt or hostile row: its tags are unreadable, the run is not
    values["tags"] = tags if isinstance(tags, list) else []
    return RunRecord(**values)


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


def send_count(db: Any, conn: Connection, key: str, statuses: Sequence[str], namespace: str | None) -> Any:
    """A quota's count (the runs of ``key`` in ``statuses``), its cursor not read yet (in a
    pipeline, say): a start's, a retry's and a fork's."""
    params = {"key": key} if namespace is None else {"key": key, "namespace": namespace}
    return db.run_text(conn, count_sql(tuple(statuses), namespace is not None), params)


def _admit(quota: QuotaCheck, active: int) -> None:
    if not admit(quota.key, quota.limit, active).admitted:
        raise ConcurrencyLimitError(quota.workflow, quota.key, quota.limit, active)


class RunRows(StorePart):
    """Runs: starts, reads, quota counts, cancellation and recoveries."""

    def count_active(self, key: str, statuses: Sequence[str], namespace: str | None) -> int:
        """How many runs tagged ``concurrency:<key>`` are in ``statuses`` (a quota's count)."""
        with self.db.read() as conn:
            return int(send_count(self.db, conn, key, statuses, namespace).fetchone()[0])

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

    def insert_run(
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
            existing = self.get_run(new.id)
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
                    write_step(db, conn, parent.run_id, parent.owner, parent.step, None, None, new.created_at)
                return existing, False
            if quota is not None:
                counted = send_count(db, conn, quota.key, quota.statuses, quota.namespace)
                _admit(quota, int(counted.fetchone()[0]))
            run, values = _new_run(new)
            db.run(conn, "insert_run", values)
            if new.owner is None:
                db.notify(conn, ["run", new.namespace])
            if parent is not None and not write_step(
                db,
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
            notice = json.dumps(["run", new.namespace])
            return self.db.run(conn, "insert_run_announced", {**values, "notice": notice})
        return self.db.run(conn, "insert_run_new", values)

    def get_run(self, run_id: str, namespace: str | None = None) -> RunRecord | None:
        """The run, or ``None`` (also when it is in another namespace than ``namespace``, if given)."""
        with self.db.single_read() as conn:
            row = self.db.run(conn, "select_run", {"id": run_id}).fetchone()
        if row is None:
            return None
        record = to_run(row)
        return record if namespace is None or record.namespace == namespace else None

    def list_runs(
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
            unfinished_only = set(statuses) <= set(ACTIVE_STATUS_VALUES)
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

    def run_statuses(self, run_ids: Iterable[str]) -> dict[str, str]:
        """The status of each known run, in one query."""
        ids = list(run_ids)
        if not ids:
            return {}
        with self.db.read() as conn:
            return dict(self.db.run_in(conn, "run_statuses", {"ids": ids}).fetchall())

    def count_recovery(self, run_id: str, owner: str) -> int | None:
        """Count one more attempt at a run a dead worker left (``recoveries``, see
        ``duro._recovery``) and return the count; ``None`` if the run is not ``owner``'s."""
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
        (a death while it waits is not its doing, see ``duro._recovery``)."""
        with self.db.single_write() as conn:
            self.db.run(conn, "clear_recoveries", {"id": run_id, "owner": owner})

    def cancel_requested(self, run_ids: Iterable[str]) -> set[str]:
        """Which of these unfinished runs have a cancel request (a worker's poll pass)."""
        ids = list(run_ids)
        if not ids:
            return set()
        with self.db.read() as conn:
            return {row[0] for row in self.db.run_in(conn, "cancel_requested", {"ids": ids})}

    def cancel_run(self, run_id: str, namespace: str | None, error: str, now: int) -> CancelOutcome:
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
                db.run(conn, "nudge_parent", {"id": run_id, "now": now})  # a parent waiting on it goes on
            db.notify(
                conn,
                *(["done", ended, "cancelled"] for ended in outcome.ended),
                *(["cancel", requested] for requested in outcome.requested),
                *(["run", name] for name in sorted(unowned)),
            )
            return outcome
