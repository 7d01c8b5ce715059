"""duro: durable workflows that share scarce capacity.

Write ``@workflow`` and ``@step`` functions; duro runs them to completion across crashes and restarts,
refuses starts beyond a per-key quota (:class:`Concurrency`), and queues work for named limits.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_names

if TYPE_CHECKING:
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
    from .client._engine import Engine
    from .client._handle import RunHandle, RunsPage
    from .client._redrive import AttemptInfo, BulkReport
    from .definitions._config import Workspace, define_workspace
    from .definitions._definitions import (
        DEFAULT_CONCURRENCY_STATUSES,
        Concurrency,
        Limit,
        Rate,
        RunStatus,
        Workflow,
        step,
        workflow,
    )
    from .limits import Slot, SlotRelease, acquire_slot, limit_slot, release_slot, with_limit
    from .rates import RateGrant, acquire_rate
    from .run._durable import (
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
    from .worker._options import WorkerOptions
    from .worker._retention import PruneReport

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
        ".definitions._config": (
            "Workspace",
            "define_workspace",
        ),
        ".definitions._definitions": (
            "DEFAULT_CONCURRENCY_STATUSES",
            "Concurrency",
            "Limit",
            "Rate",
            "RunStatus",
            "Workflow",
            "step",
            "workflow",
        ),
        ".run._durable": (
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
        ".client._engine": ("Engine",),
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
        ".client._handle": ("RunHandle", "RunsPage"),
        ".worker._retention": ("PruneReport",),
        ".client._redrive": ("AttemptInfo", "BulkReport"),
        ".worker._options": ("WorkerOptions",),
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
