"""The words of a run's, a step's and a slot's life, as types: a status spelt wrong is a type error.

Stored as these strings (``RunStatus`` is the public enum of the first); the store's records and
commands carry them typed.
"""

from __future__ import annotations

from typing import Literal

# a run: not started; executing; waiting on a timer or signal; on a slot or a child; then ended
RunState = Literal["pending", "running", "suspended", "blocked", "completed", "failed", "cancelled"]
EndState = Literal["completed", "failed", "cancelled"]  # a run's or a step's end
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
