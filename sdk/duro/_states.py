"""The words of a run's, a step's and a slot's life, as types: a status spelt wrong is a type error.

Stored as these strings (``RunStatus`` is the public enum of the first); the store's records and
commands carry them typed.
"""

from __future__ import annotations

from typing import Literal, get_args

# a run: not started; executing; waiting on a timer or signal; on a slot or a child; then ended
RunState = Literal["pending", "running", "suspended", "blocked", "completed", "failed", "cancelled"]
EndState = Literal["completed", "failed", "cancelled"]  # a run's or a step's end
UnfinishedState = Literal["pending", "running", "suspended", "blocked"]
RetryState = Literal["failed", "cancelled"]  # an end a retry takes up
StepState = Literal["waiting", "completed", "failed", "cancelled"]
# a durable call: a step; a timer; the recorded clock; a signal waited for; a child awaited or
# started; a slot waited for, released; a signal sent; a patch marker; a cancel delivered
StepKind = Literal[
    "step",
    "sleep",
    "now",
    "signal",
    "child",
    "start_child",
    "hook",
    "release",
    "send_signal",
    "patch",
    "cancel",
]
# a slot request: in the queue; handed to a run that must confirm; held; then ended
SlotState = Literal["waiting", "reserved", "busy", "released", "timed_out", "cancelled"]

RunState.__doc__ = (
    "A run's status: pending, running, suspended, blocked, then completed, failed or cancelled."
)
EndState.__doc__ = "How a run (or a step) ended: completed, failed or cancelled."
UnfinishedState.__doc__ = "A run's status before its end: pending, running, suspended or blocked."
RetryState.__doc__ = "An end a retry takes up: failed or cancelled."

# every list of statuses, derived from the types above (the SQL's lists too: see store._tables)
RUN_STATES: tuple[RunState, ...] = get_args(RunState)
ENDED: tuple[EndState, ...] = get_args(EndState)
UNFINISHED: tuple[UnfinishedState, ...] = get_args(UnfinishedState)
RETRYABLE: tuple[RetryState, ...] = get_args(RetryState)
WAITING: tuple[RunState, ...] = ("suspended", "blocked")  # due when what it waits for says so
