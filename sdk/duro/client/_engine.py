"""The engine: composes the parts of duro on one store, and is the one object users hold.

Calls go one way: the API, the CLI and the harness call the ``Engine``; it composes the parts
(:class:`~duro.definitions._registry.Registry`, :class:`~duro.client._starts.Starter`, :class:`~duro.client._runs.Runs`,
:class:`~duro.limits.Limits`, :class:`~duro.worker._schedules.Schedules`, and while entered a
:class:`~duro.worker._worker.Worker`), which talk to narrow ports (:class:`~duro.worker._gateway.StoreGateway`,
the clock, wake-ups) and through them to the store. No part imports this module.

An engine never entered is a client: it creates the schema on first use, starts runs and reads
state, and executes nothing. ``async with engine:`` runs its worker.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from .._clock import Clock, SystemClock
from .._durations import Duration
from .._errors import DuroError
from .._events import EventBus, attach_logs
from .._hooks import EngineHooks
from ..definitions._config import LimitConfig, Workspace, define_workspace
from ..definitions._definitions import Concurrency, Registry, WorkflowSpec
from ..limits import Limits, LocalSlots, limit_config
from ..rates import LocalRates, Rates
from ..run import _current
from ..run._context import RunContext
from ..store import DEFAULT_SQLITE_URL, RunRecord, SqlStore, StepRecord
from ..worker._gateway import StoreGateway
from ..worker._options import WorkerOptions
from ..worker._retention import PruneReport, Retention
from ..worker._schedules import Schedules
from ..worker._triggers import EmitResult, emit
from ..worker._worker import Worker
from ._handle import RunHandle, RunInfo, RunsPage, StepInfo, StepsPage
from ._redrive import AttemptInfo, BulkReport, Redrive
from ._replaycheck import ReplayOutcome, replay
from ._runs import Runs
from ._starts import Starter

_NAMESPACE = re.compile(r"^[A-Za-z0-9._:-]{1,64}\Z")


class Engine:
    """Runs durable workflows on one store.

    ``database_url``: ``sqlite:///path.db`` (default ``sqlite:///.duro/dev.db``) or
    ``postgresql+psycopg://...``. ``workspace``: the project's :class:`Workspace` (limits).
    ``namespace``: runs this engine creates and executes. ``scope_reads``: fence reads (and quota
    counts) to the namespace. ``clock``: the one clock (the harness injects a simulated one).
    ``options``: how its worker runs (:class:`WorkerOptions`: lease, poll interval, worker id).
    ``store``: a :class:`~duro.store.SqlStore` opened with options of your own, instead of
    ``database_url``.
    """

    def __init__(
        self,
        database_url: str | None = None,
        workspace: Workspace | None = None,
        namespace: str = "default",
        scope_reads: bool = False,
        clock: Clock | None = None,
        *,
        options: WorkerOptions | None = None,
        store: SqlStore | None = None,
    ) -> None:
        if not isinstance(namespace, str) or not _NAMESPACE.match(namespace):
            raise DuroError(
                f"namespace {namespace!r} is invalid: use 1 to 64 letters, digits, '.', '_', ':' or '-'"
            )
        if workspace is not None and not isinstance(workspace, Workspace):
            raise DuroError(f"workspace must come from define_workspace(...), got {workspace!r}")
        if options is not None and not isinstance(options, WorkerOptions):
            raise DuroError(f"options must be a WorkerOptions(...), got {options!r}")
        self.store: SqlStore = store if store is not None else SqlStore(database_url or DEFAULT_SQLITE_URL)
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.workspace = workspace if workspace is not None else define_workspace()
        self.namespace = namespace
        self.scope_reads = scope_reads
        self.options = options if options is not None else WorkerOptions()
        self.events = EventBus()
        self._hooks = EngineHooks(handle_target=self)
        self._worker: Worker | None = None
        # the runs executing here: the worker's, read by the gateway (a lone run skips the group commit)
        self._live: dict[str, RunContext] = {}
        self._gateway = StoreGateway(self.store, self._hooks, live=self._live)
        self._registry = Registry()
        self._starter = Starter(
            registry=self._registry,
            gateway=self._gateway,
            clock=self.clock,
            events=self.events,
            hooks=self._hooks,
            namespace=namespace,
            read_namespace=namespace if scope_reads else None,
        )
        self.limits = Limits(
            workspace=self.workspace, gateway=self._gateway, clock=self.clock, local=self._local_slots
        )
        self.rates = Rates(
            workspace=self.workspace, gateway=self._gateway, clock=self.clock, local=self._local_rates
        )
        self.schedules = Schedules(
            registry=self._registry,
            gateway=self._gateway,
            starter=self._starter,
            clock=self.clock,
            namespace=namespace,
            changed=self._schedules_changed,
        )
        self._runs = Runs(
            gateway=self._gateway,
            registry=self._registry,
            clock=self.clock,
            events=self.events,
            limits=self.limits,
            namespace=namespace,
            scope_reads=scope_reads,
            poll_ms=self.options.poll_interval_ms,
            local=lambda: self._worker,
        )
        self._redrive = Redrive(
            gateway=self._gateway,
            registry=self._registry,
            starter=self._starter,
            runs=self._runs,
            clock=self.clock,
            events=self.events,
            namespace=namespace,
            read_namespace=namespace if scope_reads else None,
            local=lambda: self._worker,
        )
        self._retention = Retention(
            gateway=self._gateway, clock=self.clock, events=self.events, namespace=namespace
        )
        self._context_token: Any = None
        self.meter: Any = None  # duro.metrics.Meter, once duro.metrics.collector(engine) asks
        attach_logs(self.store)

    @classmethod
    def from_project(cls, root: str | Path = ".", **kwargs: Any) -> Engine:
        """An engine for the project at ``root``: its ``duro.config.py`` and every workflow it declares."""
        from ..definitions._scan import load_project  # noqa: PLC0415 - the scanner imports user code: only when asked

        project = load_project(root)
        engine = cls(workspace=project.workspace, **kwargs)
        for spec in project.workflows:
            engine.register(spec)
        return engine

    # -- wiring ----------------------------------------------------------------------------------

    def _local_slots(self) -> LocalSlots | None:
        return None if self._worker is None else self._worker.slots

    def _local_rates(self) -> LocalRates | None:
        return None if self._worker is None else self._worker.rates

    def _schedules_changed(self) -> None:
        if self._worker is not None:
            self._worker.schedules_changed()

    @property
    def worker(self) -> Worker | None:
        """The worker this engine runs while entered (``None`` for a client), for tools and tests."""
        return self._worker

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
        return self._registry.register(name, version, fn, concurrency=concurrency, on_event=on_event)

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
        return self._registry.register_remote(name, version, concurrency=concurrency, on_event=on_event)

    @property
    def workflows(self) -> dict[str, WorkflowSpec]:
        """The registered workflows by name (each name's newest version)."""
        return self._registry.specs

    def workflow_versions(self, name: str) -> list[str]:
        """The versions of workflow ``name`` registered here, oldest first (versions coexist: a run
        executes on its recorded version's code; a start takes the newest unless it names one)."""
        return self._registry.versions(name)

    def spec_for(self, wf: Any) -> WorkflowSpec:
        """The registered spec for a workflow object or name (objects register on first use)."""
        return self._registry.spec_for(wf)

    def limit_config(self, name: str) -> LimitConfig:
        """The declared limit ``name``, or a clear error listing the limits that exist."""
        return limit_config(self.workspace, name)

    # -- starting --------------------------------------------------------------------------------

    async def start(
        self,
        wf: Any,
        inp: Any = None,
        run_id: str | None = None,
        concurrency: Concurrency | None = None,
        version: str | None = None,
    ) -> RunHandle:
        """Start a run of ``wf`` (a name or a workflow) and return its handle. ``version``: the
        registered version whose code the run executes (default: the newest registered).

        A start with an existing ``run_id`` of the same workflow returns that run, whatever its
        status; one of another workflow's run raises :class:`RunIdConflictError`. A quota at its
        limit raises :class:`ConcurrencyLimitError`. Both create nothing.
        """
        record, _ = await self._starter.start(
            wf, inp, run_id=run_id, concurrency=concurrency, version=version
        )
        return self.handle(record.id)

    async def emit(self, name: str, payload: Any = None, *, event_id: str | None = None) -> EmitResult:
        """Start every workflow subscribed to event ``name`` (``@workflow(on_event=name)``) with
        ``payload`` as its input. A subscriber refused by its quota (or by its input's validation)
        is skipped; the others start. With ``event_id``, emitting the same event again starts nothing
        new (each subscriber's run id is derived from it). (Not ``engine.events``: that is the bus
        of what happens to runs, for observers.)"""
        return await emit(self._registry, self._starter, self.handle, name, payload, event_id)

    # -- reading and acting on runs --------------------------------------------------------------

    def handle(self, run_id: str) -> RunHandle:
        """The handle of an existing run (not checked until used: then :class:`RunNotFoundError` if
        no run has the id)."""
        return RunHandle(self._hooks.handle_target, run_id)

    async def get_run(self, run_id: str) -> RunInfo:
        """The run as stored (:class:`RunInfo`); :class:`RunNotFoundError` if no run has the id."""
        return await self._runs.get_run(run_id)

    async def steps(self, run_id: str) -> list[StepInfo]:
        """The run's durable calls in sequence order; :class:`RunNotFoundError` if no run has the id."""
        return await self._runs.steps(run_id)

    async def steps_page(self, run_id: str, cursor: str | None = None, limit: int = 100) -> StepsPage:
        """A page of the run's durable calls in sequence order: at most ``limit`` (1 to 1,000) after
        ``cursor`` (``None``: from the first), and the cursor of the next page (:class:`StepsPage`).
        A run of 300,000 steps is read a page at a time; :class:`RunNotFoundError` if no run has the id."""
        return await self._runs.steps_page(run_id, cursor, limit)

    async def list_runs(
        self,
        workflow: str | None = None,
        status: Any = None,
        tag: str | None = None,
        limit: int = 100,
        before: tuple[int, str] | None = None,
        cursor: str | None = None,
    ) -> list[RunInfo]:
        """Runs, newest first, filtered by workflow name, status (one or several) and tag, at most
        ``limit``. ``cursor``: the ``next_cursor`` of a :meth:`runs_page`, for the runs after it
        (``before`` = (created_at in ms, run id) of the last run seen says the same)."""
        return await self._runs.list(workflow, status, tag, limit, before, cursor)

    async def runs_page(
        self,
        workflow: str | None = None,
        status: Any = None,
        tag: str | None = None,
        cursor: str | None = None,
        limit: int = 100,
    ) -> RunsPage:
        """A page of runs, newest first, with the filters of :meth:`list_runs`, after ``cursor``
        (``None``: the newest), and the cursor of the next page (:class:`RunsPage`; ``None`` after
        the oldest). Runs started while you page never shift a page: each run is listed once."""
        return await self._runs.page(workflow, status, tag, cursor, limit)

    async def result(self, run_id: str, timeout: Duration | None = None) -> Any:
        """Wait for the run to end; its output, or :class:`RunFailedError` (:class:`RunNotFoundError`
        if no run has the id)."""
        return await self._runs.result(run_id, timeout)

    async def signal(self, run_id: str, name: str, payload: Any = None) -> None:
        """Send signal ``name`` (with a JSON ``payload``) to a run; buffered until it waits for it.
        :class:`RunEndedError` if the run has ended, :class:`RunNotFoundError` if no run has the id."""
        await self._runs.signal(run_id, name, payload)

    async def cancel(self, run_id: str) -> None:
        """Cancel a run and its unfinished children; a finished run is left as it is."""
        await self._runs.cancel(run_id)

    # -- re-driving ended runs (see docs/redrive.md) -----------------------------------------------

    async def retry(self, run_id: str, *, version: str | None = None) -> RunHandle:
        """Retry a ``failed`` or ``cancelled`` run: it goes on under its id, on today's code, from its
        failing call (its calls before it are replayed, never executed again), or from an earlier
        slot or rate grant it no longer holds, which it takes again. ``version``: another registered
        version of its workflow to run on. One transaction: the run's quota is checked as for a start
        (:class:`ConcurrencyLimitError`), it goes back to ``pending`` and ``RunInfo.attempt`` grows by
        one; the earlier attempt's calls stay in its steps. A run that has not ended, or completed, is
        refused (:class:`RunStatusError`, a :class:`DuroError`); of two concurrent retries one wins."""
        record = await self._redrive.retry(run_id, version)
        return self.handle(record.id)

    async def fork(
        self,
        run_id: str,
        from_seq: int,
        *,
        new_run_id: str | None = None,
        version: str | None = None,
    ) -> RunHandle:
        """Start a new run of an ended run's workflow and input whose history is a copy of the
        original's calls before ``from_seq`` (cut before the first slot or rate grant among them);
        it runs from there (``RunInfo.forked_from`` is ``(run_id, from_seq)``). ``new_run_id``: its
        id (default: a new one); ``version``: a registered version to run on (default: the
        original's). A quota applies as for any start. The original is left as it is."""
        record = await self._redrive.fork(run_id, from_seq, new_run_id, version)
        return self.handle(record.id)

    async def retry_runs(
        self,
        *,
        workflow: str | None = None,
        status: str | None = "failed",
        since: Duration | datetime | None = None,
        until: Duration | datetime | None = None,
        error_type: str | None = None,
        dry_run: bool = False,
        limit: int = 1000,
        version: str | None = None,
    ) -> BulkReport:
        """Retry the runs of this namespace that ended in ``[since, until)`` (a duration before now,
        or a datetime) with ``status`` (``failed``, ``cancelled``; ``None``: both), of ``workflow``
        and whose error's class is ``error_type`` (its name or full name), at most ``limit``, oldest
        end first: each as :meth:`retry`, its own transaction. ``dry_run`` changes nothing and lists
        the runs it would retry; ``version`` moves each to that registered version (as :meth:`retry`).
        :class:`BulkReport`: the runs retried and those refused, with why."""
        return await self._redrive.retry_runs(
            workflow, status, since, until, error_type, dry_run, limit, version
        )

    async def cancel_runs(
        self,
        *,
        workflow: str | None = None,
        status: str | None = None,
        since: Duration | datetime | None = None,
        until: Duration | datetime | None = None,
        dry_run: bool = False,
        limit: int = 1000,
    ) -> BulkReport:
        """Cancel the unfinished runs created in ``[since, until)`` with ``status`` (one unfinished
        status; ``None``: all) of ``workflow``, at most ``limit``, newest first: each as
        :meth:`cancel`. ``dry_run`` changes nothing and lists them (:class:`BulkReport`)."""
        return await self._redrive.cancel_runs(workflow, status, since, until, dry_run, limit)

    async def attempts(self, run_id: str) -> list[AttemptInfo]:
        """The earlier attempts of a retried run, oldest first: how each ended and where the next
        resumed (``[]`` for a run never retried)."""
        return await self._redrive.attempts(run_id)

    async def prune(self, older_than: Duration | None = None, dry_run: bool = False) -> PruneReport:
        """Delete the finished runs (completed, failed, cancelled) of this engine's namespace that ended
        more than ``older_than`` ago (``None``: the workspace's ``retention``), with their steps,
        signals and ended slots, a bounded batch per transaction; ``dry_run`` deletes nothing and
        counts what would go. Never an unfinished run, a finished child an unfinished parent still
        names, or a run whose slot is still held. Works on a client engine too."""
        if older_than is None:
            if self.workspace.retention_ms is None:
                raise DuroError(
                    "prune needs older_than (a duration such as '30d'): this workspace sets no retention"
                )
            older_than = self.workspace.retention_ms
        return await self._retention.prune(older_than, dry_run)

    async def replay_history(self, run: RunRecord, steps: list[StepRecord]) -> ReplayOutcome:
        """Replay ``run``'s recorded ``steps`` on the code registered here, executing no step body
        and writing nothing; stops where the history ends (see ``duro.client._replaycheck``). The engine
        must be entered."""
        if self._worker is None:
            raise DuroError("replay_history needs a running engine: use it inside `async with engine:`")
        return await replay(self._worker.runtime, self._registry, run, steps)

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> Engine:
        if self._worker is not None:
            raise DuroError("this engine is already running; enter it once")
        await self._gateway.call(self.store.create_schema)
        if self.workspace.limits:  # what a client engine without the project lists
            await self._gateway.call(
                self.store.slots.declare, list(self.workspace.limits.values()), self.clock.now_ms()
            )
        if self.workspace.rates:
            await self._gateway.call(
                self.store.rates.declare, list(self.workspace.rates.values()), self.clock.now_ms()
            )
        self._live.clear()  # what an abandoned worker left
        worker = Worker(
            live=self._live,
            options=self.options,
            namespace=self.namespace,
            clock=self.clock,
            gateway=self._gateway,
            registry=self._registry,
            events=self.events,
            hooks=self._hooks,
            starter=self._starter,
            workspace=self.workspace,
            limits=self.limits,
            rates=self.rates,
            retention=self._retention,
            schedules=self.schedules,
            handle=self.handle,
            context_engine=self,
            redrive=self._redrive,
        )
        self._worker = worker
        self._starter.worker = worker
        await worker.start()
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
        self._gateway.progress.abandon()
        if worker is not None:
            await worker.abandon()
        self._gateway.abandon()
        self.close()

    def _leave(self) -> Worker | None:
        worker, self._worker = self._worker, None
        self._starter.worker = None
        _current.pop_entered(self)
        if self._context_token is not None:
            try:
                _current.current_engine.reset(self._context_token)
            except ValueError:  # exited in another context than entered
                _current.current_engine.set(None)
            self._context_token = None
        return worker

    def close(self) -> None:
        """Release the store's pooled connections and threads; a later call opens them again. From
        async code use :meth:`aclose`: this waits, blocking the event loop, for store calls in flight."""
        self._gateway.close()

    async def aclose(self) -> None:
        """Close the engine from async code: stop its worker if it runs (as leaving ``async with``
        does), then release the store's pooled connections and threads, waiting for the store calls
        in flight without blocking the event loop. A later call opens them again."""
        worker = self._leave()
        if worker is not None:
            await worker.stop()
        await asyncio.to_thread(self._gateway.close)


async def start_info(
    engine: Engine,
    wf: Any,
    inp: Any = None,
    *,
    run_id: str | None = None,
    concurrency: Concurrency | None = None,
    version: str | None = None,
) -> tuple[RunInfo, bool]:
    """``engine.start``, answered with the run as the start left it (:class:`RunInfo`: the new run
    as written, or the one its id already named: no second read) and whether this call created it
    (False: the run id was taken by an earlier start of the same workflow, possibly one racing this
    one in another process). For faces that must tell the two apart (the HTTP API's 201 and 200)."""
    record, created = await engine._starter.start(  # noqa: SLF001 - the start path the engine holds
        wf, inp, run_id=run_id, concurrency=concurrency, version=version
    )
    return RunInfo.of(record), created
