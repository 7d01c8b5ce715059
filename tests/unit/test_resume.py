"""Where a retry resumes and where a fork cuts (duro.rules._resume): pure decisions over recorded calls."""

from __future__ import annotations

import json

import pytest

from duro.rules._resume import Grant, attempt_of, failing_call, fork_cut, resume_point
from duro.store import AttemptRecord, StepRecord


def call(
    seq: int, kind: str = "step", status: str = "completed", start: int = 0, end: int | None = 0, **detail
):
    return StepRecord(
        seq,
        kind,
        f"{kind}-{seq}",
        status,
        start,
        end if status != "waiting" else None,
        detail=json.dumps(detail) if detail else None,
    )


def slot_hook(seq: int, start: int = 0, status: str = "completed") -> StepRecord:
    return call(seq, "hook", status, start, start, slot_id=f"run.{seq}", limit="payments")


def rate_hook(seq: int, start: int = 0) -> StepRecord:
    return call(seq, "hook", "completed", start, start, wait_id=f"run.{seq}", rate="partner")


def release(seq: int, slot: str, start: int = 0) -> StepRecord:
    return call(seq, "release", "completed", start, start, slot_id=slot)


@pytest.mark.parametrize(
    ("steps", "seq"),
    [
        ([], 0),  # nothing recorded: the code runs from the top
        ([call(0), call(1)], 2),  # every call completed: the code after the last one raised
        ([call(0), call(1, status="failed", start=5, end=9)], 1),  # the step whose retries ran out
        ([call(0), call(1, "sleep", "waiting")], 1),  # a wait a cancel left open
        ([call(0), call(1, "signal", "cancelled", 5, 6), call(2, "cancel", start=6, end=6)], 1),
        ([call(0), call(1, "cancel", start=3, end=3), call(2)], 1),  # a delivered cancel is never kept
        # caught: the code went on after the failure (a later call started after it ended)
        (
            [
                call(0, status="failed", start=0, end=5),
                call(1, start=6, end=7),
                call(2, status="failed", start=8, end=9),
            ],
            2,
        ),
        # in parallel (gather): the failed call is the failing one, the call beside it runs again too
        ([call(0), call(1, status="failed", start=2, end=9), call(2, start=3, end=4)], 1),
    ],
)
def test_the_failing_call(steps, seq):
    assert failing_call(steps).seq == seq


def no_grants(step: StepRecord) -> Grant | None:
    return None


def test_a_kept_slot_the_run_no_longer_holds_moves_the_resume_point_back_to_its_grant():
    steps = [call(0), slot_hook(1), call(2, status="failed", start=1, end=2), release(3, "run.1", 2)]
    released = {1: Grant(1, held=False)}
    assert resume_point(steps, lambda step: released.get(step.seq)).seq == 1
    held = {1: Grant(1, held=True)}  # still busy (a bare acquire_slot): kept, resumes at the failure
    assert resume_point(steps, lambda step: held.get(step.seq)).seq == 2


def test_a_slot_the_run_released_itself_before_the_failure_stays_kept():
    steps = [
        slot_hook(0),
        call(1, start=1, end=1),
        release(2, "run.0", 2),
        call(3, status="failed", start=3, end=4),
    ]
    grants = {0: Grant(0, held=False)}
    assert resume_point(steps, lambda step: grants.get(step.seq)).seq == 3


def test_the_first_grant_not_held_wins_and_a_rate_grant_counts_while_in_its_window():
    steps = [rate_hook(0), slot_hook(1), call(2, status="failed", start=3, end=4)]
    mixed = {0: Grant(0, True), 1: Grant(1, False)}
    assert resume_point(steps, lambda step: mixed.get(step.seq)).seq == 1
    lapsed = {0: Grant(0, False), 1: Grant(1, False)}
    assert resume_point(steps, lambda step: lapsed.get(step.seq)).seq == 0
    assert resume_point(steps, no_grants).seq == 2


def test_a_fork_copies_the_calls_before_from_seq_cut_before_a_grant_or_an_open_wait():
    steps = [call(0), call(1), slot_hook(2), call(3)]
    assert fork_cut(steps, 0) == 0
    assert fork_cut(steps, 2) == 2
    assert fork_cut(steps, 4) == 2  # never past the slot's grant
    assert fork_cut([call(0), call(1, "signal", "waiting"), call(2)], 3) == 1
    assert fork_cut([call(0), call(1, status="failed", start=0, end=1), call(2, start=2, end=2)], 3) == 3
    assert fork_cut([call(0), call(1)], 99) == 2


def test_each_call_is_shown_with_the_attempt_that_made_it():
    attempts = [
        AttemptRecord(1, "failed", None, 0, 3, "1", 0),
        AttemptRecord(2, "failed", None, 0, 1, "1", 0),
    ]
    assert [attempt_of(seq, attempts[:1]) for seq in range(5)] == [1, 1, 1, 2, 2]
    assert [attempt_of(seq, attempts) for seq in range(5)] == [1, 3, 3, 3, 3]
    assert attempt_of(7, []) == 1


def test_the_call_the_runs_error_names_fails_it_even_when_the_code_went_on():
    # a charge inside limit_slot fails; its release runs a moment later; the run fails with the charge's error
    steps = [call(0), slot_hook(1, start=1), call(2, status="failed", start=2, end=5), release(3, "run.1", 6)]
    assert failing_call(steps).seq == 4  # unnamed: the code went on past the charge
    assert failing_call(steps, raised_at=2).seq == 2
    released = {1: Grant(1, held=False)}
    assert resume_point(steps, lambda step: released.get(step.seq), raised_at=2).seq == 1  # the slot first
    # a named call that completed (not the failure after all): the rules without a name
    assert failing_call(steps, raised_at=0).seq == 4
    # a cancel delivered before the named call still comes first
    cancelled = [call(0), call(1, "cancel", start=1, end=1), call(2, status="failed", start=2, end=3)]
    assert failing_call(cancelled, raised_at=2).seq == 1


def test_an_error_says_which_call_raised_it_and_keeps_that_out_of_its_stored_state():
    from duro._errors import call_seq, raised_at
    from duro._serde import describe_error, restore_error

    charge = raised_at(ValueError("refused"), 4)
    assert call_seq(charge) == 4
    try:
        try:
            raise charge
        except ValueError as err:
            raise RuntimeError("checkout failed") from err
    except RuntimeError as wrapped:
        assert call_seq(wrapped) == 4  # through its cause
    assert call_seq(ValueError("the code's own")) is None
    text = describe_error(charge, call_seq(charge))
    assert json.loads(text)["call_seq"] == 4
    assert call_seq(restore_error(text)) is None  # a restored error names no call of this run
