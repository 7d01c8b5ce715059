"""Re-driving ended runs: ``engine.retry`` (a failed or cancelled run goes on from its failing call),
``engine.fork`` (a new run from a copy of another's first calls), and the bulk ``retry_runs`` /
``cancel_runs``. Where a retry resumes is decided in :mod:`._resume`; the store applies each retry
or fork in one transaction (``store.runs.retry``, ``store.runs.fork``)."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

from .._clock import Clock, datetime_to_ms, ms_to_datetime
from .._durations import Duration, to_ms
from .._errors import ConcurrencyLimitError, DuroError, RunStatusError
from .._events import EventBus
from .._serde import error_summary
from .._states import ENDED, RETRYABLE, UNFINISHED
from .._text import check_run_id, refuse_nul
from ..definitions._definitions import Registry
from ..store import AttemptRecord, Fork, NewRun, QuotaCheck, Retry, RunRecord
from ..worker._gateway import StoreGateway
from ._starts import Starter

PAGE = 500  # runs a bulk action reads at a time


@dataclass(frozen=True)
class BulkReport:
    """What a bulk retry or cancel did (``dry_run``: would do): the ids of the runs acted on, in the
    order they were taken, and the runs left out with why (``refused``: run id -> reason, e.g. a full
    quota key, or a run that changed meanwhile)."""

    run_ids: list[str]
    refused: dict[str, str] = field(default_factory=dict)
    dry_run: bool = False


@dataclass(frozen=True)
class AttemptInfo:
    """An earlier attempt of a retried run: its number, how it ended (``status``, ``error``,
    ``ended_at``), and where the next attempt resumed (``resume_seq``) on which ``version``, when
    (``retried_at``)."""

    attempt: int
    status: str
    error: dict[str, Any] | None
    ended_at: datetime | None
    resume_seq: int
    version: str
    retried_at: datetime

    @classmethod
    def of(cls, rec: AttemptRecord) -> AttemptInfo:
        """The attempt as users see it, from the store's record (times as aware UTC datetimes)."""
        return cls(
            attempt=rec.attempt,
            status=rec.status,
            error=error_summary(rec.error),
            ended_at=ms_to_datetime(rec.ended_at),
            resume_seq=rec.resume_seq,
            version=rec.version,
            retried_at=ms_to_datetime(rec.retried_at),
        )


class RunReader(Protocol):
    async def record(self, run_id: str) -> RunRecord: ...

    async def cancel(self, run_id: str) -> None: ...


class Waker(Protocol):
    def wake(self) -> None: ...


class Redrive:
    """Retries, forks and bulk actions of one engine (its namespace)."""

    def __init__(
        self,
        *,
        gateway: StoreGateway,
        registry: Registry,
        starter: Starter,
        runs: RunReader,
        clock: Clock,
        events: EventBus,
        namespace: str,
        read_namespace: str | None,
        local: Callable[[], Waker | None],
    ) -> None:
        self._gateway = gateway
        self._store = gateway.store
        self._registry = registry
        self._starter = starter
        self._runs = runs
        self._clock = clock
        self._events = events
        self._namespace = namespace
        self._read_namespace = read_namespace
        self._local = local

    async def retry(
        self, run_id: str, version: str | None = None, known: RunRecord | None = None
    ) -> RunRecord:
        """See ``Engine.retry``. ``known``: the run as just read (a bulk retry's page), not read again:
        the store decides on the run as it finds it, and refuses one that changed since."""
        run = known if known is not None else await self._runs.record(run_id)
        if run.status not in RETRYABLE:
            raise RunStatusError(run.id, run.status, "retry")
        target = self._version(run, version)
        quota = await self._quota(run)
        now = self._clock.now_ms()
        retry = Retry(run.id, self._read_namespace, run.attempt, target, quota, now)
        try:
            redriven = await self._gateway.call(self._store.runs.retry, retry)
        except ConcurrencyLimitError as refused:
            await self._starter.refused(run.workflow, refused, run.id)
            raise
        record = redriven.run
        self._events.publish(
            "run.retried", run.id, now, run.workflow, attempt=record.attempt, resume_seq=redriven.resume_seq
        )
        self._wake()
        return record

    async def fork(
        self, run_id: str, from_seq: int, new_run_id: str | None = None, version: str | None = None
    ) -> RunRecord:
        """See ``Engine.fork``."""
        if isinstance(from_seq, bool) or not isinstance(from_seq, int) or from_seq < 0:
            raise DuroError(
                f"fork of run {run_id!r}: from_seq must be a step's sequence number (an int from 0), "
                f"got {from_seq!r}; list the run's steps to choose one"
            )
        if new_run_id is not None:
            check_run_id(new_run_id)
        run = await self._runs.record(run_id)
        if run.status not in ENDED:
            raise RunStatusError(run.id, run.status, "fork")
        target = self._version(run, version)
        quota = await self._quota(run)
        now = self._clock.now_ms()
        new = NewRun(
            id=new_run_id or self._starter.new_run_id(),
            namespace=self._namespace,
            workflow=run.workflow,
            version=target,
            input=run.input,
            owner=None,
            created_at=now,
            tags=list(run.tags),
            concurrency_key=run.concurrency_key,
        )
        try:
            redriven = await self._gateway.call(self._store.runs.fork, Fork(run.id, from_seq, new, quota))
        except ConcurrencyLimitError as refused:
            await self._starter.refused(run.workflow, refused, new.id)
            raise
        record = redriven.run
        self._events.publish(
            "run.forked", record.id, now, run.workflow, forked_from=run.id, from_seq=from_seq
        )
        self._events.publish("run.created", record.id, now, run.workflow, parent_id=None)
        self._wake()
        return record

    async def attempts(self, run_id: str) -> list[AttemptInfo]:
        """See ``Engine.attempts``."""
        await self._runs.record(run_id)
        return [AttemptInfo.of(rec) for rec in await self._gateway.call(self._store.runs.attempts, run_id)]

    async def retry_runs(
        self,
        workflow: str | None,
        status: str | None,
        since: Duration | datetime | None,
        until: Duration | datetime | None,
        error_type: str | None,
        dry_run: bool,
        limit: int,
        version: str | None = None,
    ) -> BulkReport:
        """See ``Engine.retry_runs``."""
        if status is not None and status not in RETRYABLE:
            raise DuroError(
                f"retry_runs: status {status!r} cannot be retried; use 'failed', 'cancelled' or None (both)"
            )
        _check_bulk(limit, dry_run, "retry_runs")
        _check_text("retry_runs", workflow=workflow, error_type=error_type)
        statuses = RETRYABLE if status is None else (status,)
        now = self._clock.now_ms()
        start, end = _window(since, until, now, "retry_runs")
        chosen: list[RunRecord] = []
        after = (start, "")
        while len(chosen) < limit:
            page = await self._gateway.call(
                self._store.runs.ended_between, self._namespace, start, end, after, PAGE
            )
            for run in page:
                if run.status in statuses and workflow in (None, run.workflow) and _error_is(run, error_type):
                    chosen.append(run)
                    if len(chosen) == limit:
                        break
            if len(page) < PAGE:
                break
            last = page[-1]
            after = (last.ended_at or 0, last.id)
        if dry_run:
            return BulkReport([run.id for run in chosen], {}, True)
        return await _each(chosen, lambda run: self.retry(run.id, version, run))

    async def cancel_runs(
        self,
        workflow: str | None,
        status: str | None,
        since: Duration | datetime | None,
        until: Duration | datetime | None,
        dry_run: bool,
        limit: int,
    ) -> BulkReport:
        """See ``Engine.cancel_runs``."""
        if status is not None and status not in UNFINISHED:
            raise DuroError(
                f"cancel_runs: status {status!r} is not a status of an unfinished run; use one of "
                f"{', '.join(UNFINISHED)}, or None for all of them"
            )
        _check_bulk(limit, dry_run, "cancel_runs")
        _check_text("cancel_runs", workflow=workflow)
        statuses = list(UNFINISHED) if status is None else [status]
        now = self._clock.now_ms()
        start, end = _window(since, until, now, "cancel_runs")
        chosen: list[RunRecord] = []
        before: tuple[int, str] | None = (end, "")
        while len(chosen) < limit and before is not None:
            page = await self._gateway.call(
                self._store.runs.page, self._read_namespace, workflow, statuses, None, PAGE, before
            )
            for run in page:
                if run.created_at < start:
                    before = None
                    break
                chosen.append(run)
                if len(chosen) == limit:
                    break
            if len(page) < PAGE:
                break
            if before is not None:
                before = (page[-1].created_at, page[-1].id)
        if dry_run:
            return BulkReport([run.id for run in chosen], {}, True)
        return await _each(chosen, lambda run: self._runs.cancel(run.id))

    # -- the parts -------------------------------------------------------------------------------

    def _version(self, run: RunRecord, version: str | None) -> str:
        """The version a re-driven run executes: ``version`` (a registered version of its workflow),
        else its own."""
        if version is None:
            return run.version
        if not isinstance(version, str) or not 0 < len(version) <= 64:
            raise DuroError(
                f"version must be a registered version's name (a string of 1 to 64 characters), got {version!r}"
            )
        refuse_nul(version, "version")
        if self._registry.get(run.workflow) is not None:
            self._registry.spec_for(run.workflow, version)  # a clear error naming the versions known
        return version

    async def _quota(self, run: RunRecord) -> QuotaCheck | None:
        """The run's quota, checked as for a start: its key as stored, the limit its workflow gives
        that key now (quota keys and limits span every version)."""
        if run.concurrency_key is None:
            return None
        spec = self._registry.get(run.workflow)
        if spec is None:
            raise DuroError(
                f"run {run.id!r} has a quota (key {run.concurrency_key!r}) and workflow {run.workflow!r} "
                f"is not registered here, so its limit is unknown: re-drive it from an engine that has "
                f"its code (a worker, the dev server)"
            )
        return await self._starter.key_quota(spec, spec.concurrency, run.concurrency_key)

    def _wake(self) -> None:
        local = self._local()
        if local is not None:
            local.wake()  # a worker here claims it at once (others hear the store's notice)


async def _each(runs: list[RunRecord], act: Callable[[RunRecord], Awaitable[Any]]) -> BulkReport:
    """``act`` on each run in turn, each its own transaction (a crash leaves each run acted on or
    untouched); a run refused is reported with why, and the others go on."""
    done: list[str] = []
    refused: dict[str, str] = {}
    for run in runs:
        try:
            await act(run)
        except DuroError as err:
            refused[run.id] = str(err)
            continue
        done.append(run.id)
    return BulkReport(done, refused, False)


def _window(
    since: Duration | datetime | None, until: Duration | datetime | None, now: int, what: str
) -> tuple[int, int]:
    """A bulk action's window [since, until) in ms: from the beginning, up to now, when not given."""
    start = 0 if since is None else _instant(since, now, f"{what} since")
    end = now + 1 if until is None else _instant(until, now, f"{what} until")
    return start, end


def _instant(value: Duration | datetime, now: int, what: str) -> int:
    """A window's bound: a datetime (aware, or naive as UTC), or a duration before ``now``."""
    if isinstance(value, datetime):
        return datetime_to_ms(value)
    return now - to_ms(value, what)


def _check_text(what: str, **given: str | None) -> None:
    """A bulk action's text filters: strings, without NUL (no run's name or error holds one)."""
    for name, value in given.items():
        if value is None:
            continue
        if not isinstance(value, str) or not value:
            raise DuroError(f"{what}: {name} must be a non-empty string or None, got {value!r}")
        refuse_nul(value, f"{what}: the {name} filter")


def _check_bulk(limit: int, dry_run: bool, what: str) -> None:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise DuroError(f"{what}: limit must be a whole number of runs from 1, got {limit!r}")
    if not isinstance(dry_run, bool):
        raise DuroError(f"{what}: dry_run must be True or False, got {dry_run!r}")


def _error_is(run: RunRecord, error_type: str | None) -> bool:
    """Whether the run's error is of ``error_type``: its class's name, qualified name or full name."""
    if error_type is None:
        return True
    try:
        error = json.loads(run.error or "{}")
    except ValueError:
        return False
    if not isinstance(error, dict):
        return False
    qualname = str(error.get("qualname") or "")
    return error_type in (error.get("type"), qualname, qualname.rsplit(".", 1)[-1])
