"""Building blocks for test tooling (the duro harness uses these; so may other test runners).

Stable names: ``duration_ms``, ``datetime_to_ms``, ``ms_to_datetime``, ``EngineCrash``,
``load_project``, ``Project``, ``RunEvent``, ``LimitConfig``, ``run_store_inline``.
"""

from typing import Any

from ._clock import datetime_to_ms, ms_to_datetime
from ._config import LimitConfig
from ._durations import to_ms as duration_ms
from ._errors import EngineCrash
from ._events import RunEvent
from ._scan import Project, load_project


def run_store_inline(engine: Any) -> None:
    """Make ``engine`` call its store on the event loop instead of in threads: deterministic, for a
    private store no other process can lock or stall (the harness's in-memory SQLite, under a
    simulated clock). Never for a shared database: a locked file would stall the whole loop. Call it
    before entering the engine."""
    if engine.worker is not None:
        raise RuntimeError("run_store_inline: call it before entering the engine")
    engine._inline_db = True


__all__ = [
    "run_store_inline",
    "duration_ms",
    "datetime_to_ms",
    "ms_to_datetime",
    "EngineCrash",
    "load_project",
    "Project",
    "RunEvent",
    "LimitConfig",
]
