"""What happens to runs, as events: the dev server streams them, the harness records them.

Emitting costs one check when nobody listens. Listeners are called synchronously, in order, and must
not block; a listener that raises is dropped from the bus rather than disturbing a run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

_NO_DETAIL: Mapping[str, Any] = MappingProxyType({})


class RunEvent(NamedTuple):
    """``kind``: run.created, run.completed, run.failed, run.cancelled, step.completed, step.failed,
    step.waiting, signal.sent, slot.acquired, slot.released, quota.refused (no run was created:
    ``run_id`` is the id it would have had). A run's end carries ``created_at`` in ``detail``. ``at``: milliseconds since the epoch on the engine's clock.

    Immutable, like a frozen dataclass, and a third of its cost to build: a run emits one per step."""

    kind: str
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

    def publish(self, kind: str, run_id: str, at: int, workflow: str | None = None, **detail: Any) -> None:
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
