"""The typed errors a run id or an input is refused with, and how an input is validated: classes
of another import of the hint's module are taken, other classes refused naming both."""

from __future__ import annotations

import dataclasses
import json
import pickle
import sys
import types

import pytest
from pydantic import BaseModel, Field

import duro
from duro import DuroError, InputError, RunEndedError, RunNotFoundError, workflow
from duro._serde import Codec, describe_error, restore_error
from duro.definitions._definitions import workflow_spec

_SOURCE = """
import dataclasses
from pydantic import BaseModel, Field

class Caller(BaseModel):
    name: str

class CallRequest(BaseModel):
    phone: str = Field(alias="Phone")
    caller: Caller
    cc: list[Caller] = []
    by_name: dict[str, Caller] = {}

@dataclasses.dataclass
class Callback:
    at: str
    caller: Caller
    seen: int = dataclasses.field(default=0, init=False)
"""


@pytest.fixture
def copies(monkeypatch):
    """Make a module object of ``app.calls``; each call another copy, as a second import does.
    The last one is the one ``sys.modules`` holds (as after a project loader's import)."""

    def make() -> types.ModuleType:
        module = types.ModuleType("app.calls")
        monkeypatch.setitem(sys.modules, "app.calls", module)
        exec(_SOURCE, module.__dict__)  # noqa: S102 - a fixed source: two copies of one module
        return module

    return make


ERRORS = [
    RunNotFoundError("r-1"),
    RunNotFoundError("r-1", "tenant-a"),
    RunNotFoundError("r\x00", reason="run ids never hold a NUL character"),
    RunEndedError("r-2", "completed", "approve"),
    RunEndedError("r-2", "cancelled"),
    InputError("place_call", [{"type": "missing", "loc": ["phone"], "msg": "Field required"}], "input ..."),
]


@pytest.mark.parametrize("err", ERRORS, ids=repr)
def test_each_is_a_duro_error_exported_picklable_and_stored_as_itself(err):
    assert isinstance(err, DuroError) and type(err).__name__ in duro.__all__
    for again in (pickle.loads(pickle.dumps(err)), restore_error(describe_error(err))):
        assert type(again) is type(err) and str(again) == str(err) and vars(again) == vars(err)


def test_messages_name_the_run_and_what_to_do():
    missing = str(RunNotFoundError("r-1", "tenant-a"))
    assert "'r-1'" in missing and "'tenant-a'" in missing and "engine.list_runs()" in missing
    ended = RunEndedError("r-2", "failed", "approve")
    assert (ended.run_id, ended.status, ended.signal) == ("r-2", "failed", "approve")
    assert "'r-2'" in str(ended) and "failed" in str(ended) and "'approve'" in str(ended)
    assert "start a new run" in str(ended)


def _spec(hint):
    async def place_call(inp): ...

    place_call.__annotations__ = {"inp": hint, "return": None}  # this file's hints are strings
    return workflow_spec(workflow(place_call))


def test_an_invalid_input_carries_pydantics_errors_as_json(copies):
    mine = copies()
    with pytest.raises(InputError) as refused:
        _spec(mine.CallRequest).prepare_input({"caller": {"name": 3}})
    err = refused.value
    assert err.workflow == "place_call"
    assert [(e["type"], e["loc"]) for e in err.errors] == [
        ("missing", ["Phone"]),
        ("string_type", ["caller", "name"]),
    ]
    assert json.loads(json.dumps(err.errors)) == err.errors
    assert "Phone: Field required" in str(err) and "caller.name" in str(err)
    assert "app.calls.CallRequest" in str(err)  # the hint, by its full name


def test_no_input_and_not_json_are_input_errors_too():
    @workflow
    async def bare() -> None: ...

    @workflow
    async def loose(inp): ...

    with pytest.raises(InputError) as no_input:
        workflow_spec(bare).prepare_input(1)
    assert no_input.value.errors[0]["type"] == "none_required" and "pass None" in str(no_input.value)
    with pytest.raises(InputError) as not_json:
        workflow_spec(loose).prepare_input({"a": {1, 2}})
    assert not_json.value.errors[0]["type"] == "value_error" and "not JSON serializable" in str(
        not_json.value
    )


def test_a_model_of_another_import_is_taken_from_its_fields_nested_ones_too(copies):
    app, loaded = copies(), copies()
    assert loaded.CallRequest is not app.CallRequest
    given = app.CallRequest(
        Phone="1",
        caller=app.Caller(name="ada"),
        cc=[app.Caller(name="bob")],
        by_name={"c": app.Caller(name="cy")},
    )
    value, stored = _spec(loaded.CallRequest).prepare_input(given)
    assert type(value) is loaded.CallRequest
    assert type(value.caller) is loaded.Caller and type(value.cc[0]) is loaded.Caller
    assert type(value.by_name["c"]) is loaded.Caller
    assert json.loads(stored) == {
        "phone": "1",
        "caller": {"name": "ada"},
        "cc": [{"name": "bob"}],
        "by_name": {"c": {"name": "cy"}},
    }


def test_a_dataclass_of_another_import_and_models_inside_containers_are_taken(copies):
    app, loaded = copies(), copies()
    value, _ = _spec(loaded.Callback).prepare_input(app.Callback(at="9h", caller=app.Caller(name="ada")))
    assert type(value) is loaded.Callback and type(value.caller) is loaded.Caller
    many, _ = _spec(list[loaded.CallRequest]).prepare_input(
        [app.CallRequest(Phone="1", caller=app.Caller(name="a")), {"Phone": "2", "caller": {"name": "b"}}]
    )
    assert [type(item) for item in many] == [loaded.CallRequest, loaded.CallRequest]
    pair, _ = _spec(tuple[loaded.Caller, int]).prepare_input((app.Caller(name="a"), 1))
    assert type(pair[0]) is loaded.Caller


def test_another_class_is_refused_naming_both(copies):
    loaded = copies()

    class CallRequest(BaseModel):
        Phone: str
        caller: dict

    with pytest.raises(InputError) as refused:
        _spec(loaded.CallRequest).prepare_input(CallRequest(Phone="1", caller={"name": "a"}))
    message = str(refused.value)
    assert "the value: expected app.calls.CallRequest or its dict form" in message
    assert f"got an instance of {__name__}.{CallRequest.__qualname__}" in message
    assert refused.value.errors[0]["type"] == "model_type"


def test_a_nested_instance_of_another_class_is_refused_at_its_field(copies):
    loaded = copies()

    @dataclasses.dataclass
    class Caller:
        name: str

    with pytest.raises(InputError) as refused:
        _spec(loaded.CallRequest).prepare_input({"Phone": "1", "caller": Caller(name="a")})
    message = str(refused.value)
    assert "caller: expected app.calls.Caller" in message and f"{__name__}.{Caller.__qualname__}" in message


def test_a_field_with_an_alias_comes_back_from_its_stored_json():
    class Aliased(BaseModel):
        phone: str = Field(alias="Phone")

    codec = Codec(Aliased)
    assert codec.load(codec.dump(codec.validate({"Phone": "1"}))) == Aliased(Phone="1")
