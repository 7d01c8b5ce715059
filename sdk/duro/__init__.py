"""duro: durable workflows that share scarce capacity.

Write ``@workflow`` and ``@step`` functions; duro runs them to completion across crashes and restarts,
refuses starts beyond a per-key quota (:class:`Concurrency`), and queues work for named limits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_names

if TYPE_CHECKING:
    from ._config import Workspace, define_workspace
    from ._decorators import Workflow, step, workflow
    from ._definitions import DEFAULT_CONCURRENCY_STATUSES, Concurrency, Limit, Rate, RunStatus
    from ._durable import (
        CurrentRun,
        child,
        current_run,
        deprecate_patch,
        now,
        patched,
        send_signal,
        sleep,
        start_child,
        wait_for_signal,
    )
    from ._engine import Engine
    from ._errors import (
        ChildWorkflowError,
        ConcurrencyLimitError,
        ConfigError,
        DuroError,
        InputError,
        NonDeterminismError,
        RateLimited,
        RateTimeoutError,
        RunCancelled,
        RunEndedError,
        RunFailedError,
        RunIdConflictError,
        RunNotFoundError,
        RunSetAsideError,
        RunStatusError,
        SlotTimeoutError,
        UserExitError,
    )
    from ._handle import RunHandle, RunsPage
    from ._options import WorkerOptions
    from ._redrive import AttemptInfo, BulkReport
    from ._retention import PruneReport
    from .limits import Slot, SlotRelease, acquire_slot, limit_slot, release_slot, with_limit
    from .rates import RateGrant, acquire_rate

__all__ = [
    "workflow",
    "step",
    "Workflow",
    "Engine",
    "WorkerOptions",
    "RunHandle",
    "RunsPage",
    "PruneReport",
    "BulkReport",
    "AttemptInfo",
    "RunStatus",
    "Concurrency",
    "DEFAULT_CONCURRENCY_STATUSES",
    "Limit",
    "define_workspace",
    "Workspace",
    "acquire_slot",
    "release_slot",
    "with_limit",
    "limit_slot",
    "Slot",
    "SlotRelease",
    "Rate",
    "acquire_rate",
    "RateGrant",
    "RateTimeoutError",
    "RateLimited",
    "sleep",
    "now",
    "wait_for_signal",
    "child",
    "start_child",
    "DuroError",
    "ConfigError",
    "ConcurrencyLimitError",
    "SlotTimeoutError",
    "RunFailedError",
    "ChildWorkflowError",
    "NonDeterminismError",
    "patched",
    "deprecate_patch",
    "RunIdConflictError",
    # what a run id or an input can be refused with (HTTP 404, 409, 422)
    "RunNotFoundError",
    "RunEndedError",
    "InputError",
    "RunCancelled",
    "UserExitError",
    "RunSetAsideError",
    "RunStatusError",
    "current_run",
    "CurrentRun",
    "send_signal",
]

# Each public name loads its module on first use: ``import duro`` loads none of them, and a
# project's ``from duro import workflow, step`` loads what decorating needs, not the store.
__getattr__, __dir__ = lazy_names(
    globals(),
    {
        "._config": (
            "Workspace",
            "define_workspace",
        ),
        "._decorators": (
            "Workflow",
            "step",
            "workflow",
        ),
        "._definitions": (
            "DEFAULT_CONCURRENCY_STATUSES",
            "Concurrency",
            "Limit",
            "Rate",
            "RunStatus",
        ),
        "._durable": (
            "CurrentRun",
            "child",
            "current_run",
            "deprecate_patch",
            "now",
            "patched",
            "send_signal",
            "sleep",
            "start_child",
            "wait_for_signal",
        ),
        "._engine": ("Engine",),
        "._errors": (
            "ChildWorkflowError",
            "ConcurrencyLimitError",
            "ConfigError",
            "DuroError",
            "InputError",
            "NonDeterminismError",
            "RateLimited",
            "RateTimeoutError",
            "RunCancelled",
            "RunEndedError",
            "RunFailedError",
            "RunIdConflictError",
            "RunNotFoundError",
            "RunSetAsideError",
            "RunStatusError",
            "SlotTimeoutError",
            "UserExitError",
        ),
        "._handle": ("RunHandle", "RunsPage"),
        "._retention": ("PruneReport",),
        "._redrive": ("AttemptInfo", "BulkReport"),
        "._options": ("WorkerOptions",),
        ".limits": (
            "Slot",
            "SlotRelease",
            "acquire_slot",
            "limit_slot",
            "release_slot",
            "with_limit",
        ),
        ".rates": (
            "RateGrant",
            "acquire_rate",
        ),
    },
)
