"""Stored data is data: an error row is rebuilt only into an ``Exception`` (or duro's own
``RunCancelled``), and a value that is not JSON makes that one field unreadable."""

from __future__ import annotations

import json

import pytest

from duro import DuroError, RunCancelled
from duro._serde import UNREADABLE, describe_error, error_summary, restore_error
from duro.client._handle import RunInfo, StepInfo
from duro.store import RunRecord, StepRecord


def _row(cls: type[BaseException], *args: object) -> str:
    return json.dumps(
        {
            "type": f"builtins.{cls.__qualname__}",
            "module": "builtins",
            "qualname": cls.__qualname__,
            "message": " ".join(map(str, args)),
            "traceback": "",
            "state": {"args": [{"value": a} for a in args], "attributes": {}},
        }
    )


@pytest.mark.parametrize("cls", [SystemExit, KeyboardInterrupt, GeneratorExit, BaseException])
def test_a_stored_base_exception_comes_back_as_a_duro_error_naming_it(cls):
    restored = restore_error(_row(cls, 0))
    assert type(restored) is DuroError
    assert f"builtins.{cls.__qualname__}" in str(restored)


def test_exceptions_and_cancels_are_rebuilt():
    assert type(restore_error(_row(ValueError, "bad"))) is ValueError
    assert isinstance(restore_error(describe_error(RunCancelled("run 'r' was cancelled"))), RunCancelled)


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '"a string"', "{"])
def test_an_error_that_is_not_duros_json_is_unreadable_not_fatal(text):
    assert "unreadable" in str(restore_error(text))
    summary = error_summary(text)
    assert summary is not None and summary["type"] == UNREADABLE


def test_a_value_that_is_not_json_makes_its_field_unreadable():
    run = RunRecord(
        id="r", namespace="default", workflow="wf", version="1", status="completed",
        input="{not json", output="also not", error="<html>", tags=[], concurrency_key=None,
        parent_id=None, parent_seq=None, owner=None, wake_at=None, created_at=1000,
        updated_at=2000, ended_at=2000,
    )  # fmt: skip
    info = RunInfo.of(run)
    assert info.input == {UNREADABLE: "{not json"} and info.output == {UNREADABLE: "also not"}
    assert info.error is not None and info.error["type"] == UNREADABLE
    step = StepInfo.of(StepRecord(0, "step", "s", "completed", 1, 2, result="nope", detail="{"))
    assert step.result == {UNREADABLE: "nope"} and step.detail == {UNREADABLE: "{"}
