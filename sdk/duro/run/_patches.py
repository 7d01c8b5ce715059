"""Patch markers: a small change of workflow code under runs already in flight (``duro.patched``).

``if await patched("charge-in-cents"): <new code> else: <old code>`` is a durable call that decides
once per run and change id:

- a run that reaches it with nothing recorded at its sequence number (a new run, or a replay past
  the end of its history) records a marker (a step of kind ``patch`` named by the change id) and
  takes the new code: ``True``;
- a replay that finds that marker at its sequence number takes it: ``True``;
- a replay that finds another call there is replaying a history recorded before the patch existed:
  the marker's number is not taken (the old code made no such call) and the run keeps the old code:
  ``False``;
- a replay that finds the marker of another change id there has diverged: ``NonDeterminismError``.

Later calls with the same id in the same run return the first answer without a durable call.
``deprecate_patch(change_id)`` replaces the ``if`` once no run without the marker remains: it passes
over a recorded marker and records nothing. ``duro replay-check`` says when either step is safe.
"""

from __future__ import annotations

from typing import Final, Protocol

from .._errors import DuroError
from .._states import RunState, StepKind
from .._text import NO_NUL, NUL
from ..store import StepRecord
from ._current import Replayed

PATCH: Final = "patch"  # the kind of a marker's step record


class PatchedRun(Protocol):
    """What a patch marker needs of its run (``duro.run._context.RunContext``)."""

    patches: dict[str, bool]

    @property
    def history(self) -> Replayed: ...

    def take_seq(self, kind: StepKind, name: str) -> tuple[int, StepRecord | None]: ...

    def now_ms(self) -> int: ...

    async def write(
        self, step: StepRecord, run_status: RunState | None = None, wake_at: int | None = None
    ) -> None: ...


def _check(change_id: object, what: str) -> str:
    if not isinstance(change_id, str) or not 0 < len(change_id) <= 200 or NUL in change_id:
        raise DuroError(
            f"{what}: the change id must be a string of 1 to 200 characters, got {change_id!r}; {NO_NUL}"
        )
    return change_id


async def patched(ctx: PatchedRun, change_id: str) -> bool:
    _check(change_id, "patched")
    known = ctx.patches.get(change_id)
    if known is not None:
        return known
    ahead = ctx.history.peek()
    if ahead is not None and ahead.kind != PATCH:
        ctx.patches[change_id] = False  # a history from before the patch: the old code, for good
        return False
    seq, rec = ctx.take_seq(PATCH, change_id)  # another change's marker here: NonDeterminismError
    if rec is None:
        moment = ctx.now_ms()
        await ctx.write(StepRecord(seq, PATCH, change_id, "completed", moment, moment))
    ctx.patches[change_id] = True
    return True


async def deprecate_patch(ctx: PatchedRun, change_id: str) -> None:
    _check(change_id, "deprecate_patch")
    ahead = ctx.history.peek()
    if ahead is not None and ahead.kind == PATCH and ahead.name == change_id:
        ctx.take_seq(PATCH, change_id)
    ctx.patches[change_id] = True
