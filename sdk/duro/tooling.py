"""Building blocks for duro's faces (the dev server, the CLI) and other tooling around an engine.

Stable names: ``load_project``, ``Project``, ``RunEvent``, ``RunInfo``, ``StepInfo``, ``StepsPage``,
``LimitInfo``, ``LimitKey``, ``SlotInfo``, ``SlotsPage``, ``ScheduleInfo``, ``datetime_to_ms``, ``ms_to_datetime``,
``duration_ms``, ``format_ms``, ``SystemClock`` (the one real clock, for tools that must tell the
time), ``StoreUnavailable`` (a store call that did not get an answer in time: the dev server answers
it with 503 and ``Retry-After``), ``check_run_id`` (the rule a new run's id must follow, to check
one before reading the store with it), ``WorkflowSpec`` (a registered workflow, as
``engine.workflows`` gives it), ``ReplayOutcome``, ``history_to_json`` and ``history_from_json``
(the replay check: ``duro replay-check``, ``duro runs export``, ``env.replay``), ``version_order``
(how versions of a workflow sort: newest last), the statuses as types and lists (``RunState``,
``EndState``, ``UnfinishedState``, ``RetryState``; ``RUN_STATES``, ``ENDED``, ``UNFINISHED``,
``RETRYABLE``), ``start_info`` (a start answered with the run as it left it and whether it
created it: the dev server's 201 or 200), ``lazy_names`` (a package's public names that load
their module on first use, as duro's own do).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ._lazy import lazy_names

if TYPE_CHECKING:
    from ._clock import SystemClock, datetime_to_ms, ms_to_datetime
    from ._durations import format_ms
    from ._durations import to_ms as duration_ms
    from ._errors import StoreUnavailable
    from ._events import RunEvent
    from ._states import (
        ENDED,
        RETRYABLE,
        RUN_STATES,
        UNFINISHED,
        EndState,
        RetryState,
        RunState,
        UnfinishedState,
    )
    from ._text import check_run_id
    from .client._engine import start_info
    from .client._handle import RunInfo, StepInfo, StepsPage
    from .client._replaycheck import ReplayOutcome, history_from_json, history_to_json
    from .definitions._definitions import WorkflowSpec, version_order
    from .definitions._scan import Project, load_project
    from .limits import LimitInfo, LimitKey, SlotInfo, SlotsPage
    from .limits._types import check_key
    from .rates import RateInfo, RateWaiter
    from .worker._schedules import ScheduleInfo

__all__ = [
    "lazy_names",
    "ReplayOutcome",
    "history_from_json",
    "history_to_json",
    "version_order",
    "load_project",
    "Project",
    "RunEvent",
    "RunInfo",
    "StepInfo",
    "StepsPage",
    "LimitInfo",
    "LimitKey",
    "SlotInfo",
    "SlotsPage",
    "RateInfo",
    "RateWaiter",
    "ScheduleInfo",
    "datetime_to_ms",
    "ms_to_datetime",
    "duration_ms",
    "format_ms",
    "SystemClock",
    "StoreUnavailable",
    "check_run_id",
    "check_key",
    "WorkflowSpec",
    "start_info",
    "RUN_STATES",
    "ENDED",
    "UNFINISHED",
    "RETRYABLE",
    "RunState",
    "EndState",
    "UnfinishedState",
    "RetryState",
]

# Each name loads its module on first use: a tool that needs one record loads no store.
__getattr__, __dir__ = lazy_names(
    globals(),
    {
        "._clock": (
            "SystemClock",
            "datetime_to_ms",
            "ms_to_datetime",
        ),
        ".definitions._definitions": ("WorkflowSpec", "version_order"),
        "._durations": (
            "format_ms",
            "duration_ms=to_ms",
        ),
        "._errors": ("StoreUnavailable",),
        "._events": ("RunEvent",),
        ".client._handle": (
            "RunInfo",
            "StepInfo",
            "StepsPage",
        ),
        ".client._replaycheck": (
            "ReplayOutcome",
            "history_from_json",
            "history_to_json",
        ),
        ".definitions._scan": (
            "Project",
            "load_project",
        ),
        ".worker._schedules": ("ScheduleInfo",),
        ".client._engine": ("start_info",),
        "._states": (
            "RUN_STATES",
            "ENDED",
            "UNFINISHED",
            "RETRYABLE",
            "RunState",
            "EndState",
            "UnfinishedState",
            "RetryState",
        ),
        "._text": ("check_run_id",),
        ".limits": (
            "LimitInfo",
            "LimitKey",
            "SlotInfo",
            "SlotsPage",
        ),
        ".limits._types": ("check_key",),
        ".rates": (
            "RateInfo",
            "RateWaiter",
        ),
    },
)
