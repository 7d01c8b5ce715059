"""Where a retry resumes a run, and where a fork cuts its copy: pure decisions over a run's recorded
calls (no I/O, no clock; the store applies them in one transaction, see ``store._runs``).

A retry keeps the calls before the **failing call** and runs that call and everything after it
again. The failing call is the one whose error failed the run (the run's error names it: the durable
call that raised it, or raised the error it came from; see ``duro._errors.raised_at``), however the
code went on before re-raising (a ``finally`` that released a slot, an ``except`` that compensated).
A run whose error names no call (a cancel, or a run that failed before errors named their call)
fails at the first call that did not complete (a step whose retries ran out, a wait that timed out
or that a cancel interrupted, a failed child) and that the workflow did not go on past (a later call
started after it ended: the code caught it). A cancel delivered into the code is never kept (a
replay would deliver it again). With no such call, every call is kept: the workflow code raised,
and runs again after the last one.

**Slots stay honest:** a kept slot grant whose slot the run no longer holds (released, expired,
taken back when it ended), unless a kept call of its own released it, moves the resume point back
to that grant; so does a kept rate grant whose window has passed. The grant is taken again.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import NamedTuple, Protocol


class Call(Protocol):
    """A recorded call as these decisions read it (the store's ``StepRecord`` is one)."""

    @property
    def seq(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def status(self) -> str: ...
    @property
    def started_at(self) -> int: ...
    @property
    def ended_at(self) -> int | None: ...
    @property
    def detail(self) -> str | None: ...


class Attempt(Protocol):
    """An ended attempt as :func:`attempt_of` reads it (the store's ``AttemptRecord`` is one)."""

    @property
    def attempt(self) -> int: ...
    @property
    def resume_seq(self) -> int: ...


class Grant(NamedTuple):
    """A kept slot or rate grant, as a decision needs it: the hook step's ``seq``, and whether the
    run still holds what it granted (its slot still busy; a rate grant still inside its window)."""

    seq: int
    held: bool


class Resume(NamedTuple):
    """A retry's decision: the calls from ``seq`` on run again (``seq == len(steps)``: none of the
    recorded calls, only the code after them); ``why`` says what set it, for people."""

    seq: int
    why: str


def slot_id(step: Call) -> str | None:
    """The slot a hook step asked for (``None``: not a slot's hook, a rate's)."""
    if step.kind != "hook" or not step.detail:
        return None
    found = json.loads(step.detail).get("slot_id")
    return found if isinstance(found, str) else None


def rate_wait(step: Call) -> tuple[str, str] | None:
    """The (wait id, rate name) a rate's hook step asked for (``None``: not a rate's hook)."""
    if step.kind != "hook" or not step.detail:
        return None
    detail = json.loads(step.detail)
    wait_id, rate = detail.get("wait_id"), detail.get("rate")
    return (wait_id, rate) if isinstance(wait_id, str) and isinstance(rate, str) else None


def failing_call(steps: Sequence[Call], raised_at: int | None = None) -> Resume:
    """Where the run's last attempt failed (see the module's docstring): the seq of its failing call
    (``raised_at``: the call the run's error names), or of the first cancel delivered into its code,
    whichever comes first."""
    ordered = sorted(steps, key=lambda step: step.seq)
    named = next((step for step in ordered if step.seq == raised_at and step.status != "completed"), None)
    for index, step in enumerate(ordered):
        if step.kind == "cancel":
            return Resume(step.seq, "the cancel delivered into the code")
        if named is not None:
            if step is named:
                return Resume(step.seq, f"the call that raised the run's error, {step.name!r} ({step.kind})")
            continue
        if step.status == "completed":
            continue
        ended = step.ended_at
        went_on = ended is not None and any(later.started_at > ended for later in ordered[index + 1 :])
        if not went_on:
            return Resume(step.seq, f"the failing call {step.name!r} ({step.kind}, {step.status})")
    return Resume(ordered[-1].seq + 1 if ordered else 0, "the workflow code after the last call")


def resume_point(
    steps: Sequence[Call], grants: Callable[[Call], Grant | None], raised_at: int | None = None
) -> Resume:
    """Where a retry resumes: the failing call (``raised_at``: the seq the run's error names),
    moved back to the first kept grant the run no longer holds and did not release itself.
    ``grants`` tells, for a hook step, its grant's state (``None``: not a grant, or not granted)."""
    resume = failing_call(steps, raised_at)
    kept = [step for step in steps if step.seq < resume.seq]
    released = {
        json.loads(step.detail).get("slot_id") for step in kept if step.kind == "release" and step.detail
    }
    for step in sorted(kept, key=lambda step: step.seq):
        if step.kind != "hook" or step.status != "completed":
            continue
        grant = grants(step)
        if grant is None or grant.held or slot_id(step) in released:
            continue
        return Resume(step.seq, f"the grant {step.name!r}, which the run no longer holds")
    return resume


def fork_cut(steps: Sequence[Call], from_seq: int) -> int:
    """How many of the original's calls a fork from ``from_seq`` copies: those before ``from_seq``,
    cut before the first slot or rate grant among them (a fork holds no slot of the original) and
    before the first call still waiting or that a cancel ended (a fork waits for nothing of the
    original's); they are numbered 0..n-1, so the cut is a count."""
    cut = 0
    for step in sorted(steps, key=lambda step: step.seq):
        if step.seq >= from_seq or step.seq != cut:
            break
        if step.kind in ("hook", "cancel") or step.status in ("waiting", "cancelled"):
            break
        cut += 1
    return cut


def attempt_of(seq: int, attempts: Sequence[Attempt]) -> int:
    """Which attempt recorded the call at ``seq`` now in the run's steps: the last one whose resume
    point is at or before it (attempt 1 starts at 0; attempt n + 1 at attempt n's ``resume_seq``)."""
    recorded = 1
    for ended in attempts:
        if ended.resume_seq <= seq:
            recorded = ended.attempt + 1
    return recorded
