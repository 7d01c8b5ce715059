"""Notices are typed in the code and travel as JSON lists, kind first: what one worker sends another
reads back the same, and a list it does not know is dropped, not an error."""

from __future__ import annotations

import json

from duro.store._notify import FIELDS, DoneNotice, LookAgain, RunNotice, SlotNotice, read, wire


def test_every_kind_travels_as_a_list_and_reads_back_the_same():
    notices = [
        RunNotice(kind="run", namespace="default"),
        RunNotice(kind="run", namespace=None),
        DoneNotice(kind="done", run_id="r1", status="completed"),
        SlotNotice(kind="slot", slot_id="r1.3", due_at=1_000),
        LookAgain(kind="changed"),
    ]
    for notice in notices:
        on_the_wire = json.loads(wire(notice))
        assert on_the_wire[0] == notice["kind"] and len(on_the_wire) == 1 + len(FIELDS[notice["kind"]])
        assert read(on_the_wire) == notice
    assert json.loads(wire(DoneNotice(kind="done", run_id="r1", status="failed"))) == ["done", "r1", "failed"]


def test_a_list_this_process_does_not_know_is_dropped():
    for message in ([], ["later-kind", 1], ["done", "r1"], {"kind": "run"}, [7], "run"):
        assert read(message) is None
