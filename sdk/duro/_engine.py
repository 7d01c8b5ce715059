"""The engine: composes the store, the clock, the workflow registry, quotas and the worker.

An engine never entered is a client: it creates the schema on first use, starts runs and reads
state, and executes nothing. ``async with engine:`` runs its worker.
"""

from __future__ import annotations

import asyncio
import inspect
import re
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from . import _current
from ._batching import GroupCommit
from ._clock import Clock, SystemClock
from ._config import LimitConfig, Workspace, define_workspace
from ._decorators import WorkflowFunction, workflow_spec
from ._definitions import (
    Concurrency,
    RunStatus,
    WorkflowSpec,
    function_workflow_spec,
)
from ._durations import Duration, format_ms, to_ms
from ._errors import (
    DuroError,
    RunCancelled,
    RunFailedError,
    RunIdConflictError,
    StoreUnavailable,
)
from ._events import EventBus
from ._handle import RunHandle, RunInfo, StepInfo
from ._limits import Limits
from ._schedules import Schedules
from ._serde import Codec, describe_error, dump_json, restore_error
from ._text import NO_NUL, NUL, check_run_id, refuse_nul
from ._triggers import EmitResult, emit
from ._worker import Worker
from .store import (
    DEFAULT_SQLITE_URL,
    NewRun,
    OwnStep,
    QuotaCheck,
    RunRecord,
    SqlStore,
    Store,
    WouldWait,
    settle_sleeps,
)

T = TypeVar("T")
STORE_RETRY_S = 30.0  # how long a store call is made again while the database restarts or fails over
_NAMESPACE = re.compile(r"^[A-Za-z0-9._:-]{1,64}$")
_TERMINAL = ("completed", "failed", "cancelled")
_JSON = Codec(None)


class Engine:
    """Runs durable workflows on one store.

    ``database_url``: ``sqlite:///path.db`` (default ``sqlite:///.duro/dev.db``) or
    ``postgresql+psycopg://...``. ``workspace``: the project's :class:`Workspace` (limits).
    ``namespace``: runs this engine creates and executes. ``scope_reads``: fence reads (and quota
    counts) to the namespace. ``clock``: the one clock (the harness injects a simulated one).
    """

    def __init__(
        self,
        database_url: str | None = None,
        workspace: Workspace | None = None,
        namespace: str = "default",
        scope_reads: bool = False,
        clock: Clock | None = None,
        *,
        store: Store | None = None,
        poll_interval: Duration | None = "1s",
        lease: Duration = "30s",
        worker_id: str | None = None,
        inline_sync_steps: bool = False,
        run_id_factory: Callable[[], str] | None = None,
    ) -> None:
        if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
            raise DuroError(
                f"namespace {namespace!r} is invalid: use 1 to 64 letters, digits, '.', '_', ':' or '-'"
            )
        if workspace is not None and not isinstance(workspace, Workspace):
            raise DuroError(f"workspace must come from define_workspace(...), got {workspace!r}")
        self.store: Store = store if store is not None else SqlStore(database_url or DEFAULT_SQLITE_URL)
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.workspace = workspace if workspace is not None else define_workspace()
        self.namespace = namespace
        self.scope_reads = scope_reads
        # None: no periodic pass (one process alone on its store, e.g. under a simulated clock);
        # the worker then acts on local wakeups only.
        self.poll_interval_ms = (
            None if poll_interval is None else max(1, to_ms(poll_interval, "poll_interval"))
        )
        self.lease_ms = max(3, to_ms(lease, "lease"))
        self._worker_id = worker_id
        # Tests (the harness) run sync steps on the loop and number runs, for repeatable event orders.
        self.inline_sync_steps = inline_sync_steps
        self._new_run_id = run_id_factory or self._time_ordered_id
        self.events = EventBus()
        # What handles made by this engine call back into: the engine itself, or (under the
        # harness) a stand-in for whichever engine runs after a simulated restart.
        self.handle_target: Any = self
        self.schedules = Schedules(self)
        self.limits = Limits(self)
        # Called at named points of the engine's work (e.g. "step.executed", before the step's
        # record is written); the harness uses them to crash the box between two steps.
        self.checkpoint_hooks: list[Callable[[str, str], None]] = []
        self._registry: dict[str, WorkflowSpec] = {}
        # Store calls run in threads, so that a database that makes them wait (SQLite locked by
        # another process, PostgreSQL out of reach) never stalls the event loop: heartbeats, timers
        # and HTTP requests go on. Only the harness runs them inline (duro.testing.run_store_inline):
        # a private in-memory store no other process can lock, under a simulated clock.
        self._inline_db = False
        # SQLite's calls are tried on the loop first, never waiting for a lock (see db)
        self._now_or_never = self.store.without_waiting if self.store.dialect == "sqlite" else None
        # A release hands a freed slot to a run waiting in this engine in its own transaction (busy at
        # once, nothing to confirm: see store.ReleaseSlot). False: every hand-out is a reservation
        # (the harness, to strand one).
        self.hand_over_locally = True
        self._db_executor: ThreadPoolExecutor | None = None  # every call (PostgreSQL), or the writes (SQLite)
        self._read_executor: ThreadPoolExecutor | None = (
            None  # SQLite's reads: never queued behind a locked write
        )
        # the runs' progress writes (record_step, finish_run), group-committed: callers await its
        # write directly, a frame less on the hottest path
        self.progress = self._group_commit()
        self.worker: Worker | None = None
        self._context_token: Any = None

    def _group_commit(self) -> GroupCommit:
        return GroupCommit(self.store, self.db, alone=self._one_run_in_flight)

    def _one_run_in_flight(self) -> bool:
        """Whether a progress write may skip the group commit: the only run in flight here, on a
        store called on the loop (SQLite; PostgreSQL's batch pipelines a write's statements: one
        round trip, not two)."""
        return (self._inline_db or self._now_or_never is not None) and (
            self.worker is None or len(self.worker.live) <= 1
        )

    def _time_ordered_id(self) -> str:
        """32 hex characters, the first 12 the start's millisecond (as in UUIDv7): new runs land at the
        right edge of every id index (fewer pages written per start), and ids sort by creation."""
        return f"{self.clock.now_ms():012x}{uuid.uuid4().hex[:20]}"

    @classmethod
    def from_project(cls, root: str | Path = ".", **kwargs: Any) -> Engine:
        """An engine for the project at ``root``: its ``duro.config.py`` and every workflow it declares."""
        from ._scan import load_project

        project = load_project(root)
        engine = cls(workspace=project.workspace, **kwargs)
        for spec in project.workflows:
            engine.register(spec)
        return engine

    # -- I/O -------------------------------------------------------------------------------------

    async def db(self, fn: Callable[..., T], *args: Any) -> T:
        """Call a store method without the event loop ever waiting on the database: on SQLite the
        call is made here if it needs no lock anyone else holds (microseconds: a thread hop costs
        more than the call), else in a thread; on PostgreSQL always in a thread. Inline, waiting
        included, only under the harness (see ``_inline_db``)."""
        if self._inline_db:
            return fn(*args)
        if self._now_or_never is not None:
            try:
                return self._now_or_never(fn, *args)
            except WouldWait:
                pass
        return await self.db_on(self._executor_for(fn), fn, *args)

    def _executor_for(self, fn: Callable[..., Any]) -> ThreadPoolExecutor:
        """On SQLite, writes wait for the file's one write lock (another process may hold it for
        seconds): they get one thread of their own, since they go one at a time anyway, and reads
        (which WAL never blocks) get theirs, so that a locked file never holds up a read. PostgreSQL
        runs every call in one pool."""
        if self._db_executor is None:
            sqlite = self.store.dialect == "sqlite"
            self._db_executor = ThreadPoolExecutor(
                max_workers=1 if sqlite else 8, thread_name_prefix="duro-db"
            )
            if sqlite:
                self._read_executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="duro-db-read")
        if self._read_executor is not None and getattr(fn, "__name__", "") in self.store.reads:
            return self._read_executor
        return self._db_executor

    @property
    def threaded_db(self) -> bool:
        """Whether store calls run in threads (always, except under the harness)."""
        return not self._inline_db

    async def db_on(self, executor: ThreadPoolExecutor, fn: Callable[..., T], *args: Any) -> T:
        """Call a store method in ``executor``'s threads, again while the error is transient (30 s).
        A store still out of reach then raises :class:`StoreUnavailable` (the dev server's 503)."""
        loop = asyncio.get_running_loop()
        store = self.store
        give_up, pause = loop.time() + STORE_RETRY_S, 0.05
        while True:
            try:
                return await loop.run_in_executor(executor, partial(fn, *args))
            except Exception as err:
                # the database restarting or failing over: the same call again, for up to 30 s
                if not store.is_transient(err) or loop.time() > give_up:
                    if store.is_unavailable(err):
                        raise StoreUnavailable(
                            f"the database at {store.safe_url} is busy or out of reach "
                            f"({type(err).__name__}); nothing was changed: try again in a few seconds"
                        ) from err
                    raise
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.5)

    def checkpoint(self, point: str, run_id: str) -> None:
        for hook in self.checkpoint_hooks:
            hook(point, run_id)

    @property
    def _read_namespace(self) -> str | None:
        return self.namespace if self.scope_reads else None

    # -- registry --------------------------------------------------------------------------------

    def register(
        self,
        name: Any,
        version: str | None = None,
        fn: Callable[..., Any] | None = None,
        *,
        concurrency: Concurrency | None = None,
        on_event: str | None = None,
    ) -> WorkflowSpec:
        """Register a workflow: ``register(decorated_workflow)`` or ``register(name, version, fn,
        concurrency=...)`` for a plain ``async def``. A later registration of a name replaces it."""
        if fn is None:
            spec = name if isinstance(name, WorkflowSpec) else workflow_spec(name)
            if spec is None:
                raise DuroError(
                    f"cannot register {name!r}: pass a @workflow, a Workflow subclass, or "
                    f"register(name, version, fn)"
                )
        else:
            if not isinstance(name, str) or not name:
                raise DuroError(f"workflow name must be a non-empty string, got {name!r}")
            target = fn._fn if isinstance(fn, WorkflowFunction) else fn
            spec = function_workflow_spec(target, name, version or "1", concurrency, on_event)
        self._registry[spec.name] = spec
        return spec

    def register_remote(
        self,
        name: str,
        version: str = "1",
        *,
        concurrency: Concurrency | None = None,
        on_event: str | None = None,
    ) -> WorkflowSpec:
        """Register a workflow whose code runs in another process sharing the store: this engine can
        start it (input stored as JSON) and read it, and never executes it."""
        if not isinstance(name, str) or not name:
            raise DuroError(f"workflow name must be a non-empty string, got {name!r}")
        spec = WorkflowSpec(
            name=name,
            version=str(version),
            invoke=None,
            input=Codec(None),
            output=Codec(None),
            concurrency=concurrency,
            on_event=on_event,
        )
        self._registry[name] = spec
        return spec

    @property
    def workflows(self) -> dict[str, WorkflowSpec]:
        return dict(self._registry)

    def spec_for(self, wf: Any) -> WorkflowSpec:
        """The registered spec for a workflow object or name (objects register on first use)."""
        if isinstance(wf, str):
            spec = self._registry.get(wf)
            if spec is None:
                known = ", ".join(sorted(self._registry)) or "none"
                raise DuroError(
                    f"unknown workflow {wf!r} (registered: {known}); put it under workflows/, "
                    f"or call engine.register(...) / engine.register_remote(...)"
                )
            return spec
        spec = wf if isinstance(wf, WorkflowSpec) else workflow_spec(wf)
        if spec is None:
            raise DuroError(f"{wf!r} is not a workflow: decorate it with @workflow or pass its name")
        return self._registry.get(spec.name) or self.register(spec)

    def limit_configs(self) -> dict[str, LimitConfig]:
        return dict(self.workspace.limits)

    def limit_config(self, name: str) -> LimitConfig:
        """The declared limit ``name``, or a clear error listing the limits that exist."""
        config = self.workspace.limits.get(name) if isinstance(name, str) else None
        if config is None:
            known = ", ".join(sorted(self.workspace.limits)) or "none"
            raise DuroError(
                f"unknown limit {name!r} (declared in duro.config.py: {known}); declare it with "
                f"define_workspace(limits={{{name!r}: Limit(capacity=..., max_hold=...)}})"
            )
        return config

    def is_serial(self, name: str) -> bool:
        spec = self._registry.get(name)
        return spec is not None and spec.serial

    def serial_workflow_names(self) -> list[str]:
        return [name for name, spec in self._registry.items() if spec.serial]

    def local_workflow_names(self) -> list[str]:
        return [name for name, spec in self._registry.items() if not spec.remote]

    # -- starting --------------------------------------------------------------------------------

    async def start(
        self, wf: Any, inp: Any = None, run_id: str | None = None, concurrency: Concurrency | None = None
    ) -> RunHandle:
        """Start a run of ``wf`` (a name or a workflow) and return its handle.

        A start with an existing ``run_id`` of the same workflow returns that run, whatever its
        status; one of another workflow's run raises :class:`RunIdConflictError`. A quota at its
        limit raises :class:`ConcurrencyLimitError`. Both create nothing.
        """
        handle, _ = await self.start_run(wf, inp, run_id=run_id, concurrency=concurrency)
        return handle

    async def start_run(
        self,
        wf: Any,
        inp: Any = None,
        *,
        run_id: str | None = None,
        concurrency: Concurrency | None = None,
        parent: OwnStep | None = None,
    ) -> tuple[RunHandle, bool]:
        """``start``, also saying whether this call created the run (False: the run id was taken
        by an earlier start of the same workflow, possibly one racing this one in another process)."""
        spec = self.spec_for(wf)
        if run_id is not None:
            check_run_id(run_id)
            if parent is None:
                existing = await self.db(self.store.get_run, run_id)
                if existing is not None:
                    return self._existing(existing, spec.name), False
        value, input_json = spec.prepare_input(inp)
        quota = await self._quota(spec, concurrency if concurrency is not None else spec.concurrency, value)
        # A serial workflow's runs are always claimed, in order, one at a time (see claim_runs).
        owner = self.worker.id if self.worker is not None and not spec.remote and not spec.serial else None
        new = NewRun(
            id=run_id or self._new_run_id(),
            namespace=self.namespace,
            workflow=spec.name,
            version=spec.version,
            input=input_json,
            owner=owner,
            created_at=self.clock.now_ms(),
            tags=[f"concurrency:{quota.key}"] if quota is not None else [],
            concurrency_key=quota.key if quota is not None else None,
            parent_id=parent.run_id if parent else None,
            parent_seq=parent.step.seq if parent else None,
        )
        record, created = await self.db(self.store.insert_run, new, quota, parent)
        if not created:  # taken since the check above (or, for a child, by an earlier start)
            return self._existing(record, spec.name), False
        self.events.emit("run.created", record.id, new.created_at, spec.name, parent_id=new.parent_id)
        if owner is not None and self.worker is not None:
            self.worker.launch(record, fresh=True)
        elif spec.serial and self.worker is not None:
            self.worker.wake()
        return RunHandle(self.handle_target, record.id), True

    def _existing(self, record: RunRecord, workflow: str) -> RunHandle:
        """The handle of the run a start's ``run_id`` names, if it is a run of that workflow."""
        if record.workflow != workflow:
            raise RunIdConflictError(record.id, workflow, record.workflow)
        return RunHandle(self.handle_target, record.id)

    async def _quota(self, spec: WorkflowSpec, conc: Concurrency | None, value: Any) -> QuotaCheck | None:
        """Resolve a quota's key and limit for this start (user functions are called here, before
        the transaction); a clear error naming the workflow when either is unusable."""
        if conc is None:
            return None
        key = await _resolve(
            conc.key, value, f"workflow {spec.name!r}: the concurrency key function", "a string or None"
        )
        if key is None:
            return None
        if not isinstance(key, str) or not key:
            raise DuroError(
                f"workflow {spec.name!r}: the concurrency key must be a non-empty string or None, got {key!r}"
            )
        refuse_nul(key, f"workflow {spec.name!r}: the concurrency key {key!r}")
        limit = await _resolve(
            conc.limit, key, f"workflow {spec.name!r}: the concurrency limit function (key {key!r})", "an int"
        )
        if isinstance(limit, bool) or not isinstance(limit, int):
            raise DuroError(
                f"workflow {spec.name!r}: the concurrency limit for key {key!r} must be an int, got {limit!r}"
            )
        return QuotaCheck(
            workflow=spec.name,
            key=key,
            limit=limit,
            statuses=tuple(conc.count_statuses),
            namespace=self._read_namespace,
        )

    async def emit(self, name: str, payload: Any = None, *, event_id: str | None = None) -> EmitResult:
        """Start every workflow subscribed to event ``name`` (``@workflow(on_event=name)``) with
        ``payload`` as its input. A subscriber refused by its quota (or by its input's validation)
        is skipped; the others start. With ``event_id``, emitting the same event again starts nothing
        new (each subscriber's run id is derived from it)."""
        return await emit(self, name, payload, event_id)

    # -- reading ---------------------------------------------------------------------------------

    def handle(self, run_id: str) -> RunHandle:
        """The handle of an existing run (not checked until used)."""
        return RunHandle(self.handle_target, run_id)

    async def _record(self, run_id: str) -> RunRecord:
        if (
            isinstance(run_id, str) and NUL in run_id
        ):  # no run has such an id; PostgreSQL could not even be asked
            raise DuroError(f"run {run_id!r} does not exist: {NO_NUL}")
        record = await self.db(self.store.get_run, run_id, self._read_namespace)
        if record is None:
            raise DuroError(
                f"run {run_id!r} does not exist"
                + (f" in namespace {self.namespace!r}" if self.scope_reads else "")
            )
        return record

    async def get_run(self, run_id: str) -> RunInfo:
        return RunInfo.of(await self._record(run_id))

    async def steps(self, run_id: str) -> list[StepInfo]:
        run = await self._record(run_id)
        return [StepInfo.of(rec) for rec in settle_sleeps(await self.db(self.store.get_steps, run_id), run)]

    async def list_runs(
        self,
        workflow: str | None = None,
        status: Any = None,
        tag: str | None = None,
        limit: int = 100,
        before: tuple[int, str] | None = None,
    ) -> list[RunInfo]:
        """Runs, newest first, filtered by workflow name, status (one or several) and tag.
        ``before`` = (created_at in ms, run id) of the last run of a previous page: the next page."""
        statuses = None
        if status is not None:
            items = [status] if isinstance(status, str | RunStatus) else list(status)
            try:
                statuses = [RunStatus(s).value for s in items]
            except ValueError:
                raise DuroError(
                    f"status {status!r} is not a run status; use one of "
                    f"{', '.join(s.value for s in RunStatus)}"
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
        records = await self.db(
            self.store.list_runs, self._read_namespace, workflow, statuses, tag, limit, before
        )
        return [RunInfo.of(rec) for rec in records]

    async def result(self, run_id: str, timeout: Duration | None = None) -> Any:
        """Wait for the run to end; its output, or :class:`RunFailedError`."""
        deadline = None if timeout is None else self.clock.now_ms() + to_ms(timeout, "result timeout")
        waiter = self.worker.done_waiter(run_id) if self.worker is not None else None
        backoff = 10
        try:
            while True:
                record = await self._record(run_id)
                if record.status in _TERMINAL:
                    return self._outcome(record)
                now = self.clock.now_ms()
                if deadline is not None and now >= deadline:
                    raise TimeoutError(
                        f"run {run_id!r} did not finish within {format_ms(to_ms(timeout))}"  # type: ignore[arg-type]
                        f"; it is {record.status}"
                    )
                # With a local worker, its completion wakes us; the pass is for runs ending elsewhere.
                backoff = (
                    self.poll_interval_ms or 1000
                    if waiter
                    else min(backoff * 2, self.poll_interval_ms or 1000)
                )
                until = now + backoff if deadline is None else min(deadline, now + backoff)
                if waiter is not None:
                    await self.worker.wait_for(waiter.wait(), until)  # type: ignore[union-attr]
                    waiter.clear()
                else:
                    await self.clock.sleep_until(until)
        finally:
            if waiter is not None and self.worker is not None:
                self.worker.drop_done_waiter(run_id, waiter)

    def _outcome(self, record: RunRecord) -> Any:
        if record.status == "completed":
            spec = self._registry.get(record.workflow)
            return (spec.output if spec is not None else _JSON).load(record.output)
        cause = restore_error(record.error) if record.error else RunCancelled(record.id)
        verb = "was cancelled" if record.status == "cancelled" else "failed"
        raise RunFailedError(
            record.id,
            record.status,
            cause,
            f"run {record.id!r} of workflow {record.workflow!r} {verb}: {type(cause).__name__}: {cause}",
        )

    # -- acting on runs --------------------------------------------------------------------------

    async def signal(self, run_id: str, name: str, payload: Any = None) -> None:
        """Send signal ``name`` (with a JSON ``payload``) to a run; buffered until it waits for it."""
        if not isinstance(name, str) or not 0 < len(name) <= 200 or NUL in name:
            raise DuroError(f"signal name {name!r} is invalid: use a string of 1 to 200 characters; {NO_NUL}")
        try:
            text = dump_json(payload)
        except (TypeError, ValueError) as err:
            raise DuroError(f"payload of signal {name!r} to run {run_id!r} is not JSON: {err}") from None
        await self._record(run_id)
        await self.db(self.store.send_signal, run_id, name, text, self.clock.now_ms())
        self.events.emit("signal.sent", run_id, self.clock.now_ms(), None, name=name)
        if self.worker is not None:
            self.worker.notify_signal(run_id, name)

    async def cancel(self, run_id: str) -> None:
        """Cancel a run and its unfinished children; a finished run is left as it is."""
        if isinstance(run_id, str) and NUL in run_id:
            return  # no run has such an id (and PostgreSQL could not even be asked)
        error = describe_error(RunCancelled(f"run {run_id!r} was cancelled"))
        now = self.clock.now_ms()
        cancelled = await self.db(self.store.cancel_run, run_id, self._read_namespace, error, now)
        for cancelled_id in cancelled:
            self.events.emit("run.cancelled", cancelled_id, now)
        if self.worker is not None:
            self.worker.notify_cancelled(cancelled)
        await self.leave_queues(cancelled, now)

    async def leave_queues(self, run_ids: list[str], now: int | None = None) -> None:
        """Runs that ended (at ``now``) leave the limits' queues they wait in (slots they hold stay
        held); the hook steps they were waiting on close then, with the run's end as their status."""
        if run_ids and self.workspace.limits:
            granted = await self.db(
                self.store.slots_leave,
                self.limit_configs(),
                run_ids,
                self.clock.now_ms() if now is None else now,
            )
            self.limits.notify(granted)

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> Engine:
        if self.worker is not None:
            raise DuroError("this engine is already running; enter it once")
        await self.db(self.store.create_schema)
        self.worker = Worker(self, self._worker_id)
        await self.worker.start()
        self._context_token = _current.current_engine.set(self)
        _current.push_entered(self)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        worker = self._leave()
        if worker is not None:
            await worker.stop()
        self.close()

    async def abandon(self) -> None:
        """Stop this engine as if its process had died (for tests of recovery): in-flight runs stop
        where they are, writes not yet committed are lost, and nothing is handed back."""
        worker = self._leave()
        self.progress.abandon()
        if worker is not None:
            await worker.abandon()
        self.progress = self._group_commit()
        self.close()

    def _leave(self) -> Worker | None:
        worker, self.worker = self.worker, None
        _current.pop_entered(self)
        if self._context_token is not None:
            try:
                _current.current_engine.reset(self._context_token)
            except ValueError:  # exited in another context than entered
                _current.current_engine.set(None)
            self._context_token = None
        return worker

    def close(self) -> None:
        """Release the store's pooled connections and threads; a later call opens them again."""
        for executor in (self._db_executor, self._read_executor):
            if executor is not None:
                executor.shutdown(wait=True)
        self._db_executor = self._read_executor = None
        self.store.close()


async def _resolve(value: Any, argument: Any, what: str, expected: str) -> Any:
    """``value(argument)`` (awaited when async) if ``value`` is callable, else ``value`` itself."""
    if not callable(value):
        return value
    try:
        result = value(argument)
        if inspect.isawaitable(result):
            result = await result
    except Exception as err:  # noqa: BLE001 - user code: any failure becomes a clear DuroError
        raise DuroError(
            f"{what} raised {type(err).__name__}: {err}; fix it so it returns {expected}"
        ) from None
    return result
