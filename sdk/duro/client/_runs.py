"""Reading and acting on runs by id: ``get_run``, ``steps``, ``list_runs``, ``result``, ``signal``,
``cancel`` — what ``engine.*`` and every :class:`RunHandle` call."""

from __future__ import annotations

import builtins
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from .._clock import Clock, datetime_to_ms
from .._durations import Duration, format_ms, to_ms
from .._errors import DuroError, RunCancelled, RunEndedError, RunFailedError, RunNotFoundError
from .._events import EventBus
from .._serde import Codec, describe_error, dump_json, restore_error
from .._states import ENDED
from .._text import NO_NUL, NUL, decode_cursor, encode_cursor, refuse_nul
from ..definitions._definitions import Registry, RunStatus
from ..limits import Limits
from ..rules._resume import attempt_of
from ..store import RunRecord, StepRecord, settle_sleeps
from ..worker._gateway import StoreGateway
from ..worker._wakeups import Wakeups
from ._handle import RunInfo, RunsPage, StepInfo, StepsPage

_JSON = Codec(None)


def _after(cursor: str | None) -> int:
    """The sequence number a steps cursor stands for (the last step of the page before)."""
    if cursor is None:
        return -1
    if isinstance(cursor, str) and cursor.isascii() and cursor.isdigit() and len(cursor) <= 18:
        return int(cursor)
    raise DuroError(
        f"steps cursor {cursor!r} is not one duro gave; pass next_cursor of the previous page, "
        f"or None for the first page"
    )


def runs_cursor(info: RunInfo) -> str:
    """The cursor of the page after ``info``: its creation instant and id."""
    return encode_cursor(datetime_to_ms(info.created_at), info.id)


def _before(cursor: str | None) -> tuple[int, str] | None:
    """The (created_at, id) a runs cursor stands for (the last run of the page before)."""
    if cursor is None:
        return None
    (created,), run_id = decode_cursor(cursor, "runs", 1)
    return created, run_id


class LocalRuns(Protocol):
    """The worker of an entered engine, as reads and acts on runs see it."""

    wakeups: Wakeups

    @property
    def live(self) -> Mapping[str, Any]: ...  # the runs executing here

    def notify_signal(self, run_id: str, name: str) -> None: ...

    def notify_cancelled(self, run_ids: Sequence[str], ended: Sequence[str] = ()) -> None: ...


class Runs:
    def __init__(
        self,
        *,
        gateway: StoreGateway,
        registry: Registry,
        clock: Clock,
        events: EventBus,
        limits: Limits,
        namespace: str,
        scope_reads: bool,
        poll_ms: int | None,
        local: Callable[[], LocalRuns | None],
    ) -> None:
        self._gateway = gateway
        self._store = gateway.store
        self._registry = registry
        self._clock = clock
        self._events = events
        self._limits = limits
        self._namespace = namespace
        self._scope_reads = scope_reads
        self._read_namespace = namespace if scope_reads else None
        self._poll_ms = poll_ms
        self._local = local  # the engine's worker while it is entered

    async def record(self, run_id: str) -> RunRecord:
        """The run as stored, or :class:`RunNotFoundError` (also when it is in another namespace, if
        reads are fenced)."""
        _check_id(run_id)
        record = await self._gateway.call(self._store.runs.get, run_id, self._read_namespace)
        if record is None:
            raise RunNotFoundError(run_id, self._read_namespace)
        return record

    async def get_run(self, run_id: str) -> RunInfo:
        return RunInfo.of(await self.record(run_id))

    async def steps(self, run_id: str) -> builtins.list[StepInfo]:
        run = await self.record(run_id)
        steps = await self._gateway.call(self._store.steps.of, run_id)
        return await self._shown(run, settle_sleeps(steps, run), -1, None)

    async def steps_page(self, run_id: str, cursor: str | None, limit: int) -> StepsPage:
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= StepsPage.MAX_LIMIT:
            raise DuroError(
                f"limit {limit!r} is not a page size; give a whole number from 1 to {StepsPage.MAX_LIMIT}"
            )
        after = _after(cursor)
        run = await self.record(run_id)
        # one more than asked: whether there is a next page, and a sleep last on this page that a
        # later record settles (see settle_sleeps)
        found = await self._gateway.call(self._store.steps.page, run_id, after, limit + 1)
        settled = settle_sleeps(found, run)[:limit]
        more = len(found) > limit
        last = settled[-1].seq if more and settled else None
        return StepsPage(await self._shown(run, settled, after, last), None if last is None else str(last))

    async def _shown(
        self, run: RunRecord, steps: builtins.list[StepRecord], after: int, last: int | None
    ) -> builtins.list[StepInfo]:
        """``steps`` (the run's, settled) as users see them; for a retried run with the calls its
        earlier attempts made and a retry made again in the same seq range (after ``after``, up to
        ``last``: ``None``, to the end), each call with the attempt that made it, by (seq, attempt)."""
        if run.attempt == 1:
            return [StepInfo.of(rec) for rec in steps]
        attempts = await self._gateway.call(self._store.runs.attempts, run.id)
        past = await self._gateway.call(self._store.steps.past, run.id)
        shown = [StepInfo.of(rec, attempt_of(rec.seq, attempts)) for rec in steps]
        shown += [
            StepInfo.of(rec, attempt)
            for attempt, rec in past
            if rec.seq > after and (last is None or rec.seq <= last)
        ]
        return sorted(shown, key=lambda step: (step.seq, step.attempt))

    async def page(
        self, workflow: str | None, status: Any, tag: str | None, cursor: str | None, limit: int
    ) -> RunsPage:
        if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= RunsPage.MAX_LIMIT:
            raise DuroError(
                f"limit {limit!r} is not a page size; give a whole number from 1 to {RunsPage.MAX_LIMIT}"
            )
        found = await self.list(workflow, status, tag, limit + 1, _before(cursor))
        runs, more = found[:limit], len(found) > limit
        return RunsPage(runs, runs_cursor(runs[-1]) if more else None)

    async def list(
        self,
        workflow: str | None = None,
        status: Any = None,
        tag: str | None = None,
        limit: int = 100,
        before: tuple[int, str] | None = None,
        cursor: str | None = None,
    ) -> builtins.list[RunInfo]:
        if cursor is not None:
            if before is not None:
                raise DuroError("list_runs: give cursor or before, not both")
            before = _before(cursor)
        statuses = None
        if status is not None:
            items = [status] if isinstance(status, str | RunStatus) else builtins.list(status)
            try:
                statuses = [RunStatus(s).value for s in items]
            except ValueError:
                raise DuroError(
                    f"status {status!r} is not a run status; use one of {', '.join(s.value for s in RunStatus)}"
                ) from None
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
            raise DuroError(f"limit must be an int from 1 to 10000, got {limit!r}")
        for what, text in (
            ("workflow", workflow),
            ("tag", tag),
            ("before", None if before is None else before[1]),
        ):
            if text is not None:
                refuse_nul(text, f"the {what} filter {text!r}")
        records = await self._gateway.call(
            self._store.runs.page, self._read_namespace, workflow, statuses, tag, limit, before
        )
        return [RunInfo.of(rec) for rec in records]

    async def result(self, run_id: str, timeout: Duration | None = None) -> Any:
        deadline = None if timeout is None else self._clock.now_ms() + to_ms(timeout, "result timeout")
        local = self._local()
        waiter = local.wakeups.wait_end(run_id) if local is not None else None
        poll_ms = self._poll_ms or 1000
        backoff = 10
        executing = local is not None and run_id in local.live
        try:
            while True:
                # a run that ended here is answered from its end as written; one executing here
                # needs no first read (it exists, and has not ended)
                record = local.wakeups.ended.get(run_id) if local is not None else None
                if record is None and not executing:
                    record = await self.record(run_id)
                executing = False
                if record is not None and record.status in ENDED:
                    return self._outcome(record)
                now = self._clock.now_ms()
                if deadline is not None and now >= deadline:
                    raise TimeoutError(
                        f"run {run_id!r} did not finish within {format_ms(to_ms(timeout or 0))}"
                        f"; it is {'running' if record is None else record.status}"
                    )
                # With a local worker, its completion wakes us; the pass is for runs ending elsewhere.
                backoff = poll_ms if waiter else min(backoff * 2, poll_ms)
                until = now + backoff if deadline is None else min(deadline, now + backoff)
                if local is not None and waiter is not None:
                    await local.wakeups.wait_for(waiter.wait(), until)
                    waiter.clear()
                else:
                    await self._clock.sleep_until(until)
        finally:
            if local is not None and waiter is not None:
                local.wakeups.stop_waiting(run_id, waiter)

    def _outcome(self, record: RunRecord) -> Any:
        if record.status == "completed":
            spec = self._registry.get(record.workflow, record.version) or self._registry.get(record.workflow)
            return (spec.output if spec is not None else _JSON).load(record.output)
        cause = restore_error(record.error) if record.error else RunCancelled(record.id)
        verb = "was cancelled" if record.status == "cancelled" else "failed"
        raise RunFailedError(
            record.id,
            record.status,
            cause,
            f"run {record.id!r} of workflow {record.workflow!r} {verb}: {type(cause).__name__}: {cause}",
        )

    async def signal(self, run_id: str, name: str, payload: Any = None) -> None:
        if not isinstance(name, str) or not 0 < len(name) <= 200 or NUL in name:
            raise DuroError(f"signal name {name!r} is invalid: use a string of 1 to 200 characters; {NO_NUL}")
        try:
            text = dump_json(payload)
        except (TypeError, ValueError) as err:
            raise DuroError(f"payload of signal {name!r} to run {run_id!r} is not JSON: {err}") from None
        run = await self.record(run_id)
        if run.status in ENDED:  # the store checks again as it writes
            raise RunEndedError(run_id, run.status, name)
        await self._gateway.call(self._store.signals.send, run_id, name, text, self._clock.now_ms())
        self._events.publish("signal.sent", run_id, self._clock.now_ms(), None, name=name)
        local = self._local()
        if local is not None:
            local.notify_signal(run_id, name)

    async def cancel(self, run_id: str) -> None:
        """Record the cancel of the run and its unfinished descendants, and return: each one's worker
        delivers it into its code (``duro.run._cancel``), which ends it; one never started ends now."""
        _check_id(run_id)
        error = describe_error(RunCancelled(f"run {run_id!r} was cancelled"))
        now = self._clock.now_ms()
        outcome = await self._gateway.call(self._store.runs.cancel, run_id, self._read_namespace, error, now)
        for cancelled_id in outcome.ended:
            if self._events.wants("run.cancelled"):  # which workflow, and since when: a read each
                run = await self._gateway.call(self._store.runs.get, cancelled_id)
                if run is not None:
                    self._events.publish(
                        "run.cancelled", cancelled_id, now, run.workflow, created_at=run.created_at
                    )
                    continue
            self._events.publish("run.cancelled", cancelled_id, now)
        local = self._local()
        if local is not None:
            local.notify_cancelled(outcome.requested, outcome.ended)


def _check_id(run_id: object) -> None:
    """A run id asked for is a string (else a DuroError saying so, not "does not exist") without NUL
    (no run has such an id, and PostgreSQL could not even be asked)."""
    if not isinstance(run_id, str):
        raise DuroError(f"a run id is a string, got {type(run_id).__name__} {run_id!r}: pass the run's id")
    if NUL in run_id:
        raise RunNotFoundError(run_id, reason=NO_NUL)
