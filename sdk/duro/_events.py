"""What happens to runs, told two ways: as events (the dev server streams them, the harness records
them) and as log lines for operators (what limits, quotas and rates did, under ``duro.*``).

Emitting costs one check when nobody listens. Listeners are called synchronously, in order, and must
not block; a listener that raises is dropped from the bus rather than disturbing a run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, get_args

from ._states import StepState
from .rules._slots import SlotEvent

if TYPE_CHECKING:
    from .store import SqlStore


_NO_DETAIL: Mapping[str, Any] = MappingProxyType({})

# what can happen, as a type: an event spelt wrong is a type error
EventKind = Literal[
    "run.created",
    "run.completed",
    "run.failed",
    "run.cancelled",
    "run.retried",
    "run.forked",
    "runs.pruned",
    "step.completed",
    "step.failed",
    "step.waiting",
    "step.cancelled",
    "signal.sent",
    "slot.acquired",
    "slot.released",
    "rate.granted",
    "rate.timed_out",
    "quota.refused",
]
EVENT_KINDS: tuple[EventKind, ...] = get_args(EventKind)
STEP_EVENTS: dict[StepState, EventKind] = {
    "completed": "step.completed",
    "failed": "step.failed",
    "waiting": "step.waiting",
    "cancelled": "step.cancelled",
}  # a step written, by its status


class RunEvent(NamedTuple):
    """``kind``: one of ``EventKind`` (run.created, run.completed, run.failed, run.cancelled,
    run.retried, run.forked, runs.pruned, step.completed, step.failed, step.waiting, step.cancelled,
    signal.sent, slot.acquired, slot.released, rate.granted, rate.timed_out, quota.refused: no run
    was created, ``run_id`` is the id it would have had). A run's end carries ``created_at`` in
    ``detail``. ``at``: milliseconds since the epoch on the engine's clock.

    Immutable, like a frozen dataclass, and a third of its cost to build: a run emits one per step."""

    kind: EventKind
    run_id: str
    at: int
    workflow: str | None = None
    detail: Mapping[str, Any] = _NO_DETAIL


Listener = Callable[[RunEvent], None]
_new_event = tuple.__new__


class EventBus:
    """``engine.events``: what happens to runs, for observers (the dev server's stream, the harness)."""

    def __init__(self) -> None:
        # each listener with the kinds it asked for (None: every kind); replaced, never mutated
        self._listeners: tuple[tuple[Listener, frozenset[str] | None], ...] = ()
        self._wanted: frozenset[str] | None = frozenset()  # the kinds anyone wants (None: every kind)

    def subscribe(self, listener: Listener, kinds: Iterable[str] | None = None) -> Callable[[], None]:
        """Call ``listener`` for every event from now on (``kinds``: only those kinds; an event no
        listener wants is never built); returns a function that unsubscribes."""
        self._listeners = (*self._listeners, (listener, None if kinds is None else frozenset(kinds)))
        self._want()
        return lambda: self._drop(listener)

    def wants(self, kind: str) -> bool:
        """Whether a listener wants ``kind`` (an event that costs a read to describe is skipped
        otherwise)."""
        return self._wanted is None or kind in self._wanted

    def _drop(self, listener: Listener) -> None:
        self._listeners = tuple(known for known in self._listeners if known[0] is not listener)
        self._want()

    def _want(self) -> None:
        kinds = [wanted for _, wanted in self._listeners]
        self._wanted = None if None in kinds else frozenset().union(*(k for k in kinds if k is not None))

    def publish(
        self, kind: EventKind, run_id: str, at: int, workflow: str | None = None, **detail: Any
    ) -> None:
        """Tell every listener what happened to a run (``engine.emit`` is something else: it starts
        the workflows subscribed to an event)."""
        wanted = self._wanted  # wants(), written out: every durable call publishes
        if wanted is not None and kind not in wanted:
            return  # nobody listens for it (the common case: nobody listens at all)
        event = _new_event(RunEvent, (kind, run_id, at, workflow, detail))  # RunEvent(...) without its frame
        for listener, kinds in self._listeners:
            if kinds is not None and kind not in kinds:
                continue
            try:
                listener(event)
            except Exception:  # noqa: BLE001 - a broken listener must not break a run
                self._drop(listener)


# -- log lines for operators -----------------------------------------------------------------
# What limits and quotas did, one line each, under the ``duro.*`` loggers.
#
# - ``duro.limits``: a slot granted (with its wait), expired by ``max_hold`` (a ``release_slot`` that
#   never happened: a warning), a request timed out, a reservation lapsed;
# - ``duro.quota``: a start refused by a concurrency quota;
# - ``duro.rates``: a rate paused (by a step's ``RateLimited`` or an operator) and resumed, a wait
#   timed out.
#
# Each line names the limit, the rate or the workflow, never a quota key, a rate key, a slot label, a run id or a payload,
# and carries the same facts as attributes of the log record (``event``, ``limit`` or ``workflow``,
# ``wait_ms`` or ``held_ms``), which ``duro dev --log-format json`` prints as fields (see
# ``duro_devserver.logs``). The lines cost one check each while their logger is off.

limits_log = logging.getLogger("duro.limits")
quota_log = logging.getLogger("duro.quota")
rates_log = logging.getLogger("duro.rates")

_LINES = {
    "held": (logging.INFO, "slot.granted", "slot of limit %s granted after waiting %d ms", "wait_ms"),
    "expired": (
        logging.WARNING,
        "slot.expired",
        "slot of limit %s taken back by max_hold after %d ms: its release_slot never happened",
        "held_ms",
    ),
    "timed_out": (logging.INFO, "slot.timed_out", "slot request of limit %s timed out in the queue", None),
    "lapsed": (
        logging.INFO,
        "slot.reservation_lapsed",
        "slot reservation of limit %s lapsed: its run did not take it in time (requeued)",
        None,
    ),
}


def log_slot_events(events: Sequence[SlotEvent]) -> None:
    """A store slot listener (see ``SqlStore.slots.listeners``): one line per event worth a line."""
    log = limits_log
    for kind, limit, ms in events:
        line = _LINES.get(kind)
        if line is None:
            continue
        level, event, message, field = line
        if not log.isEnabledFor(level):
            continue
        if field is None:
            log.log(level, message, limit, extra={"event": event, "limit": limit})
        else:
            log.log(level, message, limit, ms or 0, extra={"event": event, "limit": limit, field: ms or 0})


def log_quota_refused(workflow: str, limit: int) -> None:
    if quota_log.isEnabledFor(logging.INFO):
        quota_log.info(
            "start of workflow %s refused: its concurrency key is at its limit (%d)",
            workflow,
            limit,
            extra={"event": "quota.refused", "workflow": workflow, "quota_limit": limit},
        )


def attach_logs(store: SqlStore) -> None:
    """Log what ``store`` decides about slots (once per store: engines may share one)."""
    listeners = store.slots.listeners
    if log_slot_events not in listeners:
        listeners.append(log_slot_events)


def log_rate(event: str, rate: str, pause_ms: int | None = None, by: str | None = None) -> None:
    """One line for a rate: ``rate.paused`` (for ``pause_ms``, ``by`` a step or an operator, of the
    whole rate or of one key: the key is never written), ``rate.resumed`` or ``rate.timed_out``."""
    log = rates_log
    if not log.isEnabledFor(logging.INFO):
        return
    extra: dict[str, object] = {"event": event, "rate": rate}
    if event == "rate.paused":
        extra |= {"pause_ms": pause_ms or 0, "by": by or "operator"}
        log.info("rate %s paused for %d ms by %s", rate, pause_ms or 0, by or "operator", extra=extra)
    elif event == "rate.resumed":
        log.info("rate %s resumed", rate, extra=extra)
    else:
        log.info("a wait for rate %s timed out in the queue", rate, extra=extra)
