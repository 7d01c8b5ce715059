"""Where the app gets its engine: one fixed engine (``duro serve``, tests), or a dev project that
swaps in a fresh engine on every reload (``duro dev``, see :mod:`.project`). Both feed one
:class:`Hub`, which fans events out to the live streams (SSE) of Studio and other clients."""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Protocol

from duro import Engine
from duro.metrics import Meter
from duro.tooling import RunEvent, ms_to_datetime

from .logs import log

QUEUE_SIZE = 1000  # per subscriber; a client too slow to keep up loses its oldest events, never the server
MAX_SUBSCRIBERS = 200  # live streams at once: each costs a queue of up to QUEUE_SIZE events


class Hub:
    """Fan-out of ``(event name, JSON data)`` to every live subscriber, without blocking anyone."""

    def __init__(self) -> None:
        self._queues: set[asyncio.Queue[tuple[str, dict[str, Any]]]] = set()

    def publish(self, event: str, data: dict[str, Any]) -> None:
        for queue in self._queues:
            if queue.full():
                queue.get_nowait()
            queue.put_nowait((event, data))

    @contextmanager
    def subscribe(self) -> Iterator[asyncio.Queue[tuple[str, dict[str, Any]]]]:
        queue: asyncio.Queue[tuple[str, dict[str, Any]]] = asyncio.Queue(QUEUE_SIZE)
        self._queues.add(queue)
        try:
            yield queue
        finally:
            self._queues.discard(queue)

    @property
    def subscribers(self) -> int:
        return len(self._queues)

    @property
    def full(self) -> bool:
        """Whether a new stream would pass ``MAX_SUBSCRIBERS`` (the server's own subscribers count)."""
        return len(self._queues) >= MAX_SUBSCRIBERS

    def forward(self, event: RunEvent) -> None:
        """An engine's event listener: run events go out as ``run`` messages."""
        self.publish(
            "run",
            {
                "kind": event.kind,
                "run_id": event.run_id,
                "workflow": event.workflow,
                "at": ms_to_datetime(event.at).isoformat(),
                "detail": _plain(event.detail),
            },
        )


def _plain(detail: Mapping[str, Any]) -> dict[str, Any]:
    return {
        key: value if isinstance(value, str | int | float | bool | None) else str(value)
        for key, value in detail.items()
    }


class ProjectUnavailable(Exception):
    """The project failed to load: there is no engine to answer with (the app answers 503)."""

    def __init__(self, error: dict[str, str]) -> None:
        self.error = error
        super().__init__(error["message"])


class EngineSource(Protocol):
    """What the app needs: the current engine, the event hub, a status, and a lifespan; and the
    :class:`Meter` attached to every engine the source runs (``GET /metrics`` counts with it, so
    its counters never go back when the engine changes)."""

    hub: Hub
    meter: Meter

    @property
    def engine(self) -> Engine: ...

    def status(self) -> dict[str, Any]: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


class FixedEngine:
    """One engine for the app's whole life. ``run_worker``: enter the engine (execute runs) while the
    app runs; otherwise the app is a client of a store that other workers execute."""

    def __init__(self, engine: Engine, *, run_worker: bool = True, project: str | None = None) -> None:
        self._engine = engine
        self.hub = Hub()
        self.run_worker = run_worker
        self.project = project
        self._unsubscribe = engine.events.subscribe(self.hub.forward)
        self.meter = Meter()
        self._detach_meter = self.meter.attach(engine)
        self._entered = False

    @property
    def engine(self) -> Engine:
        return self._engine

    def status(self) -> dict[str, Any]:
        return {
            "project": self.project,
            "database": _safe_url(self._engine),
            "loaded_at": None,
            "load_error": None,
            "reloads": 0,
        }

    async def start(self) -> None:
        if self.run_worker and self._engine.worker is None:
            await self._engine.__aenter__()
            self._entered = True

    async def stop(self) -> None:
        if self._entered:
            self._entered = False
            await self._engine.__aexit__(None, None, None)
        self._unsubscribe()
        self._detach_meter()


def _safe_url(engine: Engine) -> str | None:
    return getattr(engine.store, "safe_url", None)


def describe_load_error(err: BaseException) -> dict[str, str]:
    """A load failure as Studio and the terminal show it: one line, and the whole traceback."""
    cause = err.__cause__ or err
    return {
        "message": f"{type(err).__name__}: {err}",
        "traceback": "".join(traceback.format_exception(cause)),
    }


def print_load_error(error: dict[str, str], *, running: bool = True) -> None:
    """Log a load failure (``duro.devserver``, an error; ``event`` ``project.load_failed``): the
    traceback, and what the server does meanwhile. ``running``: an
    earlier version loaded and keeps running; otherwise none ever did, and the server waits for a
    fix (the API answers 503 for what needs the project)."""
    if running:
        meanwhile = "the server keeps running the last good version"
    else:
        meanwhile = (
            "no version of it has loaded yet: the server waits for a fix (the API answers 503 "
            "for what needs the project)"
        )
    log.error(
        "the project failed to load; %s.\n%s%s\nduro: fix it and save: it reloads at once.",
        meanwhile,
        error["traceback"],
        error["message"],
        extra={"event": "project.load_failed"},
    )
