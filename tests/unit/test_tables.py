"""A run, a step and a slot have one shape each: their records. The columns the store selects and
writes are the records' fields, and the tables hold exactly those (and what only the store reads)."""

from __future__ import annotations

from duro.rules._slots import SlotRow
from duro.store import RunRecord, StepRecord
from duro.store._queries import RUN_COLUMNS, SLOT_COLUMNS, STEP_COLUMNS
from duro.store._tables import Run, SlotRequest, Step


def columns(table: type) -> set[str]:
    return {column.name for column in table.__table__.columns}  # type: ignore[attr-defined]


def test_a_run_row_is_its_record_and_what_only_the_store_reads():
    assert RUN_COLUMNS == tuple(name for name in RunRecord._fields if name != "fresh")
    # due_at: when a worker must take the run up; recoveries: the claims counting a suspect run
    assert columns(Run) == {*RUN_COLUMNS, "due_at", "recoveries"}


def test_a_step_row_is_its_run_id_and_its_record():
    assert STEP_COLUMNS == ("run_id", *StepRecord._fields)
    assert columns(Step) == set(STEP_COLUMNS)


def test_a_slot_row_is_its_record_and_its_due_time():
    assert SLOT_COLUMNS[-1] == "due_at"
    as_fields = {"limit_name": "limit", "limit_key": "key"}
    assert [as_fields.get(c, c) for c in SLOT_COLUMNS[:-1]] == list(SlotRow._fields)
    assert columns(SlotRequest) == set(SLOT_COLUMNS)


def test_a_slot_reads_back_as_written():
    from duro.store._connection import slot_row, slot_values

    row = SlotRow("s1", "lines", "r1", "busy", 3, "call", 10, None, None, 11, 12, 1000, 1012, None, None)
    values = slot_values(row)
    assert values["limit_name"] == "lines" and values["due_at"] == 1012
    assert slot_row(tuple(values[c] for c in SLOT_COLUMNS)) == row


def test_the_typed_states_are_the_public_statuses():
    from typing import get_args

    from duro import RunStatus
    from duro._states import EndState, RunState

    assert set(get_args(RunState)) == {s.value for s in RunStatus}
    assert set(get_args(EndState)) == {s.value for s in RunStatus if s.terminal}
