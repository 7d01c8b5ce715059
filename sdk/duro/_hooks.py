"""The harness's private hold on an engine: what a test environment changes about how it runs.

Not public API. ``duro.testing.hooks(engine)`` gives the :class:`EngineHooks` of an engine not yet
entered; the harness (``duro_harness``) sets them. Nothing else in duro reads them but the parts
named on each field.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any


@dataclass
class EngineHooks:
    # Store calls made on the event loop, waiting included (duro.worker._gateway): deterministic, for a
    # private store no other process can lock (the harness's in-memory SQLite).
    inline_store: bool = False
    # Sync steps run on the loop instead of in threads (duro.run._context): a repeatable event order.
    inline_sync_steps: bool = False
    # New run ids (duro.client._starts): numbered, for repeatable ids, instead of time-ordered random ones.
    new_run_id: Callable[[], str] | None = None
    # Called at named points of a run's work ("step.executed" before the step's record is written,
    # "run.finishing", "slot.confirming"); the harness raises EngineCrash there to crash the engine.
    checkpoints: list[Callable[[str, str], None]] = field(default_factory=list)
    # A release hands a freed slot straight to a run idle in this process (duro.store.ReleaseSlot's
    # local_waiters). False: every grant is a reservation (the harness, to strand one).
    grant_locally: bool = True
    # What handles made by the engine call (duro.client._handle.RunAccess): the engine itself, or the
    # harness's stand-in for whichever engine runs after a simulated restart.
    handle_target: Any = None
    # The step bodies executing now, as (run id, step name) (duro.run._context), when a list: the
    # harness waits for them (a step awaiting real I/O) before it calls the runs idle.
    executing: list[tuple[str, str]] | None = None

    def executing_step(self, run_id: str, name: str) -> AbstractContextManager[None]:
        """``with``: the async body of step ``name`` of run ``run_id`` runs (listed in ``executing``)."""
        return _NOT_LISTED if self.executing is None else _Executing(self.executing, (run_id, name))

    def checkpoint(self, point: str, run_id: str) -> None:
        """Call every checkpoint hook: the run ``run_id`` reached ``point``."""
        for hook in self.checkpoints:
            hook(point, run_id)


_NOT_LISTED: AbstractContextManager[None] = nullcontext()


class _Executing(AbstractContextManager[None]):
    def __init__(self, executing: list[tuple[str, str]], entry: tuple[str, str]) -> None:
        self._executing, self._entry = executing, entry

    def __enter__(self) -> None:
        self._executing.append(self._entry)

    def __exit__(self, *exc: object) -> None:
        self._executing.remove(self._entry)
