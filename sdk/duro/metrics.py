"""Prometheus metrics of limits, rates, quotas and runs (``prometheus_client``).

``collector(engine)`` returns a collector to register on an app's own registry::

    from prometheus_client import REGISTRY
    REGISTRY.register(duro.metrics.collector(engine))

Two kinds of figures, with different sources:

- **Gauges** of each limit declared in the engine's workspace (``duro_limit_capacity``,
  ``duro_limit_busy``, ``duro_limit_reserved``, ``duro_limit_waiting``) are read from the store at
  scrape time, in one query for all four: every process that shares a database reports the same
  truth, whichever process took or freed the slots. The same for each declared rate
  (``duro_rate_limit``, ``duro_rate_waiting``, ``duro_rate_paused``).
- **Counters and histograms** count what this process did from the moment its engine was given a
  collector (or, in ``duro dev`` and ``duro serve``, since the server started): slot waits and holds,
  expiries (a ``release_slot`` that never happened), timeouts, lapsed reservations, refused starts,
  started, finished, retried, forked and pruned runs, rate grants (``duro_rate_granted_total``, ``duro_rate_wait_seconds``)
  and rate timeouts. Sum them across processes in PromQL. Those of each declared limit and
  registered workflow are exported at 0 from the first scrape, so ``increase()`` sees the first event.

No label carries a quota key, a rate key, a slot label or a run id: only a limit's, a rate's or a
workflow's name, and a run's final status. The metric list, with a PromQL line for the common questions: docs/observability.md.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from ._clock import Clock
from ._events import EventBus, RunEvent
from .definitions._config import Workspace
from .rules._slots import SlotEvent

if TYPE_CHECKING:
    from .store import SqlStore

try:
    from prometheus_client import Counter, Histogram
    from prometheus_client.core import GaugeMetricFamily, Metric
    from prometheus_client.registry import Collector
except ImportError as err:  # pragma: no cover - a base dependency; only a broken install lacks it
    raise ImportError(
        "duro.metrics needs prometheus_client: pip install prometheus_client (a dependency of duro)"
    ) from err


class Engine(Protocol):
    """What metrics read of a :class:`duro.Engine` (a protocol: the parts never import the engine)."""

    events: EventBus
    store: SqlStore
    workspace: Workspace
    clock: Clock
    meter: Any

    @property
    def workflows(self) -> Mapping[str, Any]: ...


__all__ = ["Meter", "collector"]

log = logging.getLogger("duro.metrics")

# seconds: a slot wait is milliseconds to hours (a call queued behind 20 busy lines); a hold, a call
WAIT_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, float("inf"))
HOLD_BUCKETS = (0.01, 0.1, 0.5, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, float("inf"))
RUN_BUCKETS = (0.005, 0.025, 0.1, 0.5, 1, 5, 15, 60, 300, 3600, 86_400, float("inf"))

_FINISHED = {"run.completed": "completed", "run.failed": "failed", "run.cancelled": "cancelled"}
COUNTED = (
    "run.created",
    *_FINISHED,
    "quota.refused",
    "rate.granted",
    "rate.timed_out",
    "runs.pruned",
    "run.retried",
    "run.forked",
)  # the bus builds no other event for the meter


class Meter:
    """The counters and histograms of one process: fed by the engines it is attached to (their
    event bus, and their store's committed slot decisions), read by :func:`collector`. A dev
    server keeps one meter across reloads, so its counters never go back."""

    def __init__(self) -> None:
        def histogram(name: str, doc: str, label: str, buckets: Sequence[float]) -> Histogram:
            return Histogram(name, doc, [label], registry=None, buckets=buckets)

        def counter(name: str, doc: str, *labels: str) -> Counter:
            return Counter(name, doc, list(labels), registry=None)

        self.slot_wait = histogram(
            "duro_slot_wait_seconds", "Slot requests: from enqueue to grant (held).", "limit", WAIT_BUCKETS
        )
        self.slot_hold = histogram(
            "duro_slot_hold_seconds", "Slots: from grant to release or expiry.", "limit", HOLD_BUCKETS
        )
        self.expired = counter(
            "duro_slot_expired_total", "Slots taken back by max_hold: a release that got lost.", "limit"
        )
        self.timeouts = counter(
            "duro_slot_timeouts_total", "Slot requests that timed out in the queue.", "limit"
        )
        self.lapsed = counter(
            "duro_slot_reservations_lapsed_total",
            "Reservations their run did not confirm in time (requeued).",
            "limit",
        )
        self.refused = counter(
            "duro_quota_refused_total", "Starts refused by a concurrency quota (HTTP 429).", "workflow"
        )
        self.started = counter("duro_runs_started_total", "Runs started (created).", "workflow")
        self.finished = counter(
            "duro_runs_finished_total", "Runs that ended, by final status.", "workflow", "status"
        )
        self.set_aside = counter(
            "duro_runs_set_aside_total",
            "Runs failed after their workers died executing them max_recoveries times in a row.",
            "workflow",
        )
        self.retried = counter(
            "duro_runs_retried_total", "Failed or cancelled runs retried from their failing call.", "workflow"
        )
        self.forked = counter("duro_runs_forked_total", "Runs started as a fork of another run.", "workflow")
        self.pruned = Counter(
            "duro_runs_pruned_total",
            "Finished runs deleted by the retention or a prune, with their steps, signals and slots.",
            registry=None,
        )
        self.duration = histogram(
            "duro_run_duration_seconds", "Runs: from start (creation) to end.", "workflow", RUN_BUCKETS
        )
        self.rate_granted = counter("duro_rate_granted_total", "Grants of a rate made to runs.", "rate")
        self.rate_timeouts = counter(
            "duro_rate_timeouts_total", "Waits for a rate's grant that timed out in the queue.", "rate"
        )
        self.rate_wait = histogram(
            "duro_rate_wait_seconds", "Grants of a rate: from request to grant.", "rate", WAIT_BUCKETS
        )
        # each label's child, kept: ``labels()`` takes a lock and builds a key at every call
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self._metrics = (
            self.slot_wait,
            self.slot_hold,
            self.expired,
            self.timeouts,
            self.lapsed,
            self.refused,
            self.started,
            self.finished,
            self.set_aside,
            self.retried,
            self.forked,
            self.pruned,
            self.duration,
            self.rate_granted,
            self.rate_timeouts,
            self.rate_wait,
        )

    # -- feeding ---------------------------------------------------------------------------------

    def attach(self, engine: Engine) -> Callable[[], None]:
        """Count what ``engine`` does from now on; returns a function that stops it."""
        unsubscribe = engine.events.subscribe(self.on_run_event, COUNTED)
        listeners = engine.store.slots.listeners
        listeners.append(self.on_slot_events)

        def detach() -> None:
            unsubscribe()
            if self.on_slot_events in listeners:
                listeners.remove(self.on_slot_events)

        return detach

    def _child(self, metric: Any, *labels: str) -> Any:
        key = (id(metric), labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def on_run_event(self, event: RunEvent) -> None:
        kind = event.kind
        if kind[:4] != "run." and kind != "quota.refused":
            if kind[:5] == "rate.":
                self._on_rate_event(event)
            elif kind == "runs.pruned":
                self.pruned.inc(int(event.detail.get("runs") or 0))
            return  # a step's or a signal's: most events, and none of them counted
        child = self._child
        if kind == "run.created":
            child(self.started, event.workflow or "").inc()
        elif kind in _FINISHED:
            workflow = event.workflow or event.detail.get("workflow") or ""
            child(self.finished, workflow, _FINISHED[kind]).inc()
            if event.detail.get("error") == "RunSetAsideError":
                child(self.set_aside, workflow).inc()
            created = event.detail.get("created_at")
            if created is not None:
                child(self.duration, workflow).observe(max(0, event.at - created) / 1000)
        elif kind == "quota.refused":
            child(self.refused, event.workflow or "").inc()
        elif kind == "run.retried":
            child(self.retried, event.workflow or "").inc()
        elif kind == "run.forked":
            child(self.forked, event.workflow or "").inc()

    def _on_rate_event(self, event: RunEvent) -> None:
        rate = str(event.detail.get("rate", ""))
        if event.kind == "rate.granted":
            self._child(self.rate_granted, rate).inc()
            self._child(self.rate_wait, rate).observe(max(0, int(event.detail.get("waited_ms") or 0)) / 1000)
        elif event.kind == "rate.timed_out":
            self._child(self.rate_timeouts, rate).inc()

    def on_slot_events(self, events: Sequence[SlotEvent]) -> None:
        child = self._child
        for kind, limit, ms in events:
            if kind == "held":
                child(self.slot_wait, limit).observe(max(0, ms or 0) / 1000)
            elif kind == "released":
                child(self.slot_hold, limit).observe(max(0, ms or 0) / 1000)
            elif kind == "expired":
                child(self.slot_hold, limit).observe(max(0, ms or 0) / 1000)
                child(self.expired, limit).inc()
            elif kind == "timed_out":
                child(self.timeouts, limit).inc()
            elif kind == "lapsed":
                child(self.lapsed, limit).inc()

    def declare(self, limits: Iterable[str], workflows: Iterable[str], rates: Iterable[str] = ()) -> None:
        """Export every series of these limits, workflows and rates from now on, at 0 until its first
        event: ``increase()`` over a series that appears with its first event misses that event."""
        child = self._child
        for rate in rates:
            for metric in (self.rate_granted, self.rate_timeouts, self.rate_wait):
                child(metric, rate)
        for limit in limits:
            for metric in (self.slot_wait, self.slot_hold, self.expired, self.timeouts, self.lapsed):
                child(metric, limit)
        for workflow in workflows:
            for metric in (self.refused, self.started, self.duration, self.set_aside):
                child(metric, workflow)
            for status in _FINISHED.values():
                child(self.finished, workflow, status)

    # -- reading ---------------------------------------------------------------------------------

    def collect(self) -> Iterator[Metric]:
        for metric in self._metrics:
            yield from metric.collect()

    def describe(self) -> Iterator[Metric]:
        for metric in self._metrics:
            yield from metric.describe()


GAUGES = (
    ("duro_limit_capacity", "A limit's effective capacity (its operator override, else duro.config.py)."),
    ("duro_limit_busy", "A limit's slots held now."),
    ("duro_limit_reserved", "A limit's slots reserved for a waiting run, not yet taken."),
    ("duro_limit_waiting", "Runs waiting in a limit's queue now."),
)
RATE_GAUGES = (
    ("duro_rate_limit", "A rate's effective limit per window (its operator override, else duro.config.py)."),
    ("duro_rate_waiting", "Runs waiting for a rate's grant now."),
    ("duro_rate_paused", "1 while a rate is paused (by a step's RateLimited or an operator), else 0."),
)
KEY_GAUGES = (
    ("duro_limit_keys", "A keyed limit's keys with a busy, reserved or waiting slot now."),
    ("duro_limit_keys_full", "A keyed limit's keys at their capacity now."),
)


class DuroCollector(Collector):
    """What :func:`collector` returns: the store's gauges of every declared limit, read at scrape
    time in one query, and the meter's counters and histograms."""

    def __init__(self, engine: Callable[[], Engine], meter: Meter) -> None:
        self._engine = engine
        self.meter = meter

    def describe(self) -> Iterable[Metric]:
        gauges = [GaugeMetricFamily(name, doc, labels=["limit"]) for name, doc in (*GAUGES, *KEY_GAUGES)]
        rate_gauges = [GaugeMetricFamily(name, doc, labels=["rate"]) for name, doc in RATE_GAUGES]
        return [*gauges, *rate_gauges, *self.meter.describe()]

    def collect(self) -> Iterable[Metric]:
        gauges = [GaugeMetricFamily(name, doc, labels=["limit"]) for name, doc in GAUGES]
        key_gauges = [GaugeMetricFamily(name, doc, labels=["limit"]) for name, doc in KEY_GAUGES]
        try:
            engine = self._engine()
            declared = engine.workspace.limits
            self.meter.declare(declared, engine.workflows, engine.workspace.rates)  # cached after the first
            states = engine.store.limits.states() if declared else {}
        except Exception as err:  # noqa: BLE001 - the store out of reach: the counters still answer
            log.warning("duro metrics: the limits' gauges are missing from this scrape: %s", err)
            declared, states = {}, {}
        for name, config in sorted(declared.items()):
            state = states.get(name)
            capacity = (
                config.capacity
                if state is None or state.capacity_override is None
                else state.capacity_override
            )
            values = (
                (capacity, 0, 0, 0)
                if state is None
                else (capacity, state.busy, state.reserved, state.waiting)
            )
            for gauge, value in zip(gauges, values, strict=True):
                gauge.add_metric([name], value)
        for name, config in sorted(declared.items()):
            if config.per_key is None:
                continue
            try:  # the keys themselves never leave the store: only how many, and how many full
                active, full = engine.store.limits.key_tally(config)
            except Exception as err:  # noqa: BLE001 - see above
                log.warning("duro metrics: the keys' gauges of a limit are missing from this scrape: %s", err)
                continue
            key_gauges[0].add_metric([name], active)
            key_gauges[1].add_metric([name], full)
        return [*gauges, *key_gauges, *self._rate_gauges(), *self.meter.collect()]

    def _rate_gauges(self) -> list[GaugeMetricFamily]:
        """The declared rates' limit, waiters and pause, read from the store in one query."""
        gauges = [GaugeMetricFamily(name, doc, labels=["rate"]) for name, doc in RATE_GAUGES]
        try:
            engine = self._engine()
            declared = engine.workspace.rates
            now = engine.clock.now_ms()
            states = {s.name: s for s in engine.store.rates.states(now)} if declared else {}
        except Exception as err:  # noqa: BLE001 - the store out of reach: the counters still answer
            log.warning("duro metrics: the rates' gauges are missing from this scrape: %s", err)
            return gauges
        for name, config in sorted(declared.items()):
            state = states.get(name)
            override = None if state is None else state.limit_override
            paused = state is not None and state.paused_until is not None and state.paused_until > now
            values = (override or config.limit, 0 if state is None else state.waiting, int(paused))
            for gauge, value in zip(gauges, values, strict=True):
                gauge.add_metric([name], value)
        return gauges


def meter_of(engine: Engine) -> Meter:
    """The engine's meter, attached on first use (what :func:`collector` counts)."""
    meter: Meter | None = getattr(engine, "meter", None)
    if meter is None:
        meter = Meter()
        engine.meter = meter
        meter.attach(engine)  # for the engine's life
    return meter


def collector(engine: Engine | Callable[[], Engine], meter: Meter | None = None) -> DuroCollector:
    """A ``prometheus_client`` collector of ``engine``'s metrics, for an app's own registry
    (``REGISTRY.register(collector(engine))``). Counting starts now; the limits' gauges are read
    from the store at each scrape. ``engine`` may be a function returning the current engine (a
    dev server that reloads), with ``meter`` kept across the engines it returns."""
    if not callable(engine):
        current = engine
        return DuroCollector(lambda: current, meter if meter is not None else meter_of(engine))
    if meter is None:
        raise TypeError("collector(engine_function) needs meter=: the Meter its engines are attached to")
    return DuroCollector(engine, meter)
