"""The records the store returns: a sleep's end is derived, never written (``settle_sleeps``)."""

from __future__ import annotations

from duro.store import RunRecord, StepRecord, settle_sleeps


def run(updated_at: int, status: str = "suspended") -> RunRecord:
    return RunRecord(
        id="r",
        namespace="default",
        workflow="wf",
        version="1",
        status=status,
        input=None,
        output=None,
        error=None,
        tags=[],
        concurrency_key=None,
        parent_id=None,
        parent_seq=None,
        owner="w",
        wake_at=None,
        created_at=0,
        updated_at=updated_at,
        ended_at=None,
    )


def sleep(seq: int, started: int, wake: int) -> StepRecord:
    return StepRecord(seq, "sleep", "sleep", "waiting", started, wake_at=wake)


def test_a_sleep_not_yet_due_is_waiting():
    (step,) = settle_sleeps([sleep(0, 100, 5000)], run(updated_at=100))
    assert (step.status, step.ended_at) == ("waiting", None)


def test_a_sleep_is_over_once_the_run_was_written_at_or_after_its_wake_time():
    (step,) = settle_sleeps([sleep(0, 100, 5000)], run(updated_at=5000, status="running"))
    assert (step.status, step.ended_at) == ("completed", 5000)


def test_a_sleep_followed_by_another_record_is_over_whatever_the_run_row_says():
    steps = settle_sleeps([sleep(0, 100, 5000), sleep(1, 5003, 9000)], run(updated_at=4000))
    assert [(s.status, s.ended_at) for s in steps] == [("completed", 5000), ("waiting", None)]


def test_other_records_and_the_input_list_are_left_alone():
    done = StepRecord(0, "step", "charge", "completed", 1, 2, result="1")
    signal = StepRecord(1, "signal", "go", "waiting", 3, wake_at=10)
    original = [done, signal]
    assert settle_sleeps(original, run(updated_at=99)) == [done, signal]
    assert original[1].status == "waiting"
