"""Starting a run: the one path every start takes (``engine.start``, a child, an event, a schedule).

The existing-run check, then the quota's key and limit resolved from the input (user functions are
called here, before the transaction), then one atomic insert in the store that counts the key's
runs and refuses a start over the limit. A run this process executes is launched at once.
"""

from __future__ import annotations

import inspect
import uuid
from typing import Any, Protocol

from .._clock import Clock
from .._errors import ConcurrencyLimitError, DuroError, RunIdConflictError
from .._events import EventBus, log_quota_refused
from .._hooks import EngineHooks
from .._text import NUL, check_run_id, refuse_nul
from .._tracing import start_span
from ..definitions._definitions import Concurrency, Registry, WorkflowSpec
from ..rules._quota import RECENT_RUNS
from ..rules._quota import retry_after as estimate_retry_after
from ..store import NewRun, OwnStep, QuotaCheck, RunRecord
from ..worker._gateway import StoreGateway


class Launcher(Protocol):
    """The worker of an entered engine, as a start sees it."""

    id: str

    def launch(self, run: RunRecord, fresh: bool = False, spec: WorkflowSpec | None = None) -> None: ...

    def has_room(self) -> bool: ...

    def wake(self) -> None: ...


class Starter:
    def __init__(
        self,
        *,
        registry: Registry,
        gateway: StoreGateway,
        clock: Clock,
        events: EventBus,
        hooks: EngineHooks,
        namespace: str,
        read_namespace: str | None,
    ) -> None:
        self._registry = registry
        self._gateway = gateway
        self._clock = clock
        self._events = events
        self._hooks = hooks
        self._namespace = namespace
        self._read_namespace = read_namespace  # quotas count here only (scope_reads), or everywhere
        self.worker: Launcher | None = None  # set while the engine is entered

    def new_run_id(self) -> str:
        """32 hex characters, the first 12 the start's millisecond (as in UUIDv7): new runs land at the
        right edge of every id index (fewer pages written per start), and ids sort by creation."""
        if self._hooks.new_run_id is not None:
            return self._hooks.new_run_id()
        return f"{self._clock.now_ms():012x}{uuid.uuid4().hex[:20]}"

    async def start(
        self,
        wf: Any,
        inp: Any = None,
        *,
        run_id: str | None = None,
        concurrency: Concurrency | None = None,
        parent: OwnStep | None = None,
        version: str | None = None,
    ) -> tuple[RunRecord, bool]:
        """Start a run of ``wf``: (the run, whether this call created it). False: the run id was taken
        by an earlier start of the same workflow, possibly one racing this one in another process.
        ``parent``: the starting run's step, written with the child in one transaction."""
        spec = self._registry.spec_for(wf, version)  # the newest version unless one is named
        store = self._gateway.store
        if run_id is not None:
            check_run_id(run_id)
            if parent is None:
                existing = await self._gateway.call(store.runs.get, run_id)
                if existing is not None:
                    return _same_workflow(existing, spec.name), False
        value, input_json = spec.prepare_input(inp)
        conc = concurrency if concurrency is not None else spec.concurrency
        quota = await self._quota(spec, conc, value)
        worker = self.worker
        # A serial workflow's runs are always claimed, in order, one at a time (see claim_runs).
        # Beyond the worker's capacity (max_concurrent_runs), the run is left to the store, due now.
        local = worker is not None and not spec.remote and not spec.serial
        owner = worker.id if local and worker is not None and worker.has_room() else None
        with start_span(spec.name) as trace_context:  # the starter's trace, stored with the run
            new = NewRun(
                id=run_id or self.new_run_id(),
                namespace=self._namespace,
                workflow=spec.name,
                version=spec.version,
                input=input_json,
                owner=owner,
                created_at=self._clock.now_ms(),
                tags=[f"concurrency:{quota.key}"] if quota is not None else [],
                concurrency_key=quota.key if quota is not None else None,
                parent_id=parent.run_id if parent else None,
                parent_seq=parent.step.seq if parent else None,
                trace_context=trace_context,
            )
            try:
                record, created = await self._gateway.call(store.runs.insert, new, quota, parent)
            except ConcurrencyLimitError as refused:
                await self.refused(spec.name, refused, new.id, conc)
                raise
        if not created:  # taken since the check above (or, for a child, by an earlier start)
            return _same_workflow(record, spec.name), False
        self._events.publish("run.created", record.id, new.created_at, spec.name, parent_id=new.parent_id)
        if worker is not None:
            if owner is not None:
                worker.launch(record, fresh=True, spec=spec)  # the workflow looked up once a start
            elif spec.serial or local:
                worker.wake()
        return record, True

    async def _quota(self, spec: WorkflowSpec, conc: Concurrency | None, value: Any) -> QuotaCheck | None:
        """Resolve a quota's key and limit for this start; a clear error naming the workflow when
        either is unusable."""
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
        if NUL in key:
            refuse_nul(key, f"workflow {spec.name!r}: the concurrency key {key!r}")
        return await self.key_quota(spec, conc, key)

    async def key_quota(self, spec: WorkflowSpec, conc: Concurrency | None, key: str) -> QuotaCheck | None:
        """The quota check of ``key`` (a start's, or a retried run's as stored): the limit ``conc``
        gives it now; ``None`` when the workflow has no quota any more."""
        if conc is None:
            return None
        limit = await _resolve(
            conc.limit,
            key,
            f"workflow {spec.name!r}: the concurrency limit function (key {key!r})",
            "an int",
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

    async def refused(
        self, workflow: str, refused: ConcurrencyLimitError, run_id: str, conc: Concurrency | None = None
    ) -> None:
        """A start (or a retry, a fork) of ``workflow`` refused by its quota: its ``retry_after``
        set, logged and published."""
        if conc is None:
            spec = self._registry.get(workflow)
            conc = None if spec is None else spec.concurrency
        refused.retry_after = await self._retry_after(conc, refused)
        log_quota_refused(workflow, refused.limit)
        self._events.publish("quota.refused", run_id, self._clock.now_ms(), workflow)

    async def _retry_after(self, conc: Concurrency | None, refused: ConcurrencyLimitError) -> int:
        """The quota's own ``retry_after``, else the estimate from the key's recent runs (one
        bounded read, on refusal only; a store that fails it leaves the refusal as it is: 1 s)."""
        given = None if conc is None else conc.retry_after_s
        if given is not None:
            return given
        try:
            durations = await self._gateway.call(
                self._gateway.store.runs.recent_durations, refused.key, self._read_namespace, RECENT_RUNS
            )
        except Exception:  # noqa: BLE001 - the refusal is what the caller must hear
            return 1
        return estimate_retry_after(durations, refused.active, refused.limit)


def _same_workflow(record: RunRecord, workflow: str) -> RunRecord:
    """The run a start's ``run_id`` names, if it is a run of that workflow."""
    if record.workflow != workflow:
        raise RunIdConflictError(record.id, workflow, record.workflow)
    return record


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
