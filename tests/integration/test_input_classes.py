"""An input built from the app's own import of a workflow module is taken: the project loader keeps
the modules the app imported (one copy per process), and an instance of another module object of the
same file (a second import, ``_fresh_copy``) is taken too. A class that is really another one is
refused, naming both."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from pydantic import BaseModel

from duro import Engine, InputError, RunStatus, child, workflow

PROJECT = Path(__file__).parent / "calls_project"
pytestmark = pytest.mark.duro(project="tests/integration/calls_project")


def _app_import(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``from workflows import calls`` as an app does it, before any engine loads the project."""
    for name in [n for n in sys.modules if n == "workflows" or n.startswith("workflows.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.syspath_prepend(str(PROJECT))
    return importlib.import_module("workflows.calls")


def _fresh_copy() -> ModuleType:
    """Another module object of ``workflows.calls`` (what a second import of the file gives)."""
    spec = importlib.util.spec_from_file_location("workflows.calls", PROJECT / "workflows" / "calls.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_an_engine_from_the_project_takes_the_apps_own_model(monkeypatch, database_url):
    app = _app_import(monkeypatch)
    request = app.CallRequest(Phone="+33 1", caller=app.Caller(name="ada"), cc=[app.Caller(name="bob")])
    async with Engine.from_project(PROJECT, database_url=database_url) as engine:
        loaded = sys.modules["workflows.calls"]
        assert loaded is app and loaded.CallRequest is app.CallRequest  # one copy: the app's
        handle = await engine.start("place_call", request)
        assert await handle.result(timeout="10s") == "ada -> +33 1 (+1)"
        assert (await handle.info()).input == {
            "phone": "+33 1",
            "caller": {"name": "ada"},
            "cc": [{"name": "bob"}],
        }
        # the decorated function from the app's import starts the loaded workflow too
        other = await app.place_call.start(request, engine=engine)
        assert await other.result(timeout="10s") == "ada -> +33 1 (+1)"
        # a dataclass of the app's import, with the app's model inside
        callback = await engine.start(
            "schedule_callback", app.Callback(at="9h", caller=app.Caller(name="cy"))
        )
        assert await callback.result(timeout="10s") == "cy at 9h"
        # a list of them, and each one on to a child
        batch = await engine.start("call_batch", [request, {"Phone": "2", "caller": {"name": "dee"}}])
        assert await batch.result(timeout="10s") == ["ada -> +33 1 (+1)", "dee -> 2 (+0)"]


async def test_another_class_of_the_same_name_is_refused_naming_both(monkeypatch, database_url):
    class CallRequest(BaseModel):  # the same name, the same fields: still another class
        Phone: str
        caller: dict

    async with Engine.from_project(PROJECT, database_url=database_url) as engine:
        with pytest.raises(InputError) as refused:
            await engine.start("place_call", CallRequest(Phone="1", caller={"name": "ada"}))
        assert await engine.list_runs() == []
    message = str(refused.value)
    assert "expected workflows.calls.CallRequest" in message
    assert f"got an instance of {__name__}.{CallRequest.__qualname__}" in message
    assert refused.value.workflow == "place_call"
    assert [e["type"] for e in refused.value.errors] == ["model_type"]


async def test_a_nested_model_of_another_class_is_refused_at_its_field(database_url):
    copy = _fresh_copy()

    class Caller(BaseModel):
        name: str

    async with Engine.from_project(PROJECT, database_url=database_url) as engine:
        with pytest.raises(InputError) as refused:
            await engine.start(
                "place_call", copy.CallRequest.model_construct(phone="1", caller=Caller(name="x"))
            )
    assert "caller: expected workflows.calls.Caller" in str(refused.value)
    assert f"{__name__}.{Caller.__qualname__}" in str(refused.value)


async def test_the_harness_takes_a_model_of_another_import(duro_env):
    copy = _fresh_copy()
    request = copy.CallRequest(Phone="5", caller=copy.Caller(name="eve"))
    handle = await duro_env.start("place_call", request)
    assert await handle.result() == "eve -> 5 (+0)"
    started = await copy.place_call.start(request, engine=duro_env.engine)
    assert await started.result() == "eve -> 5 (+0)"


async def test_a_child_started_with_a_model_of_another_import_takes_it(duro_env):
    copy = _fresh_copy()

    @workflow
    async def relay() -> str:
        return await child("place_call", copy.CallRequest(Phone="7", caller=copy.Caller(name="fay")))

    handle = await duro_env.start(relay)
    assert await handle.result() == "fay -> 7 (+0)"
    assert await handle.status() == RunStatus.COMPLETED
