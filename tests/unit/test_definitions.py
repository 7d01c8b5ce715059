import dataclasses

import pytest
from pydantic import BaseModel

from duro import (
    DEFAULT_CONCURRENCY_STATUSES,
    Concurrency,
    ConfigError,
    DuroError,
    RunStatus,
    Workflow,
    step,
    workflow,
)
from duro.definitions._definitions import workflow_spec


class Order(BaseModel):
    id: str
    qty: int


@dataclasses.dataclass
class Receipt:
    order_id: str
    total: float


def test_run_status_is_a_str_enum():
    assert RunStatus.RUNNING == "running"
    assert str(RunStatus.BLOCKED) == "blocked"
    assert [s.value for s in RunStatus] == [
        "pending",
        "running",
        "suspended",
        "blocked",
        "completed",
        "failed",
        "cancelled",
    ]
    assert set(DEFAULT_CONCURRENCY_STATUSES) == {"pending", "running", "suspended", "blocked"}


def test_bare_and_called_decorators_build_specs():
    @workflow
    async def plain(order: Order) -> Receipt: ...

    @workflow(name="orders.place", version="3")
    async def named(order: Order) -> Receipt: ...

    assert workflow_spec(plain).name == "plain"
    assert (workflow_spec(named).name, workflow_spec(named).version) == ("orders.place", "3")
    value, text = workflow_spec(plain).prepare_input({"id": "a", "qty": 2})
    assert value == Order(id="a", qty=2) and text == '{"id":"a","qty":2}'
    assert workflow_spec(plain).output.dump(Receipt("a", 3.5)) == '{"order_id":"a","total":3.5}'
    assert workflow_spec(plain).input.json_schema()["properties"]["qty"]["type"] == "integer"


def test_class_form_reads_class_level_config():
    quota = Concurrency(key=lambda inp: f"tenant:{inp.id}", limit=8)

    @workflow
    class ChatTurn(Workflow):
        name = "chat.turn"
        version = "2"
        concurrency = quota

        async def run(self, ctx, inp: Order) -> str: ...

    spec = workflow_spec(ChatTurn)
    assert (spec.name, spec.version, spec.concurrency) == ("chat.turn", "2", quota)


def test_bad_input_is_a_clear_error():
    @workflow
    async def place(order: Order) -> None: ...

    with pytest.raises(DuroError) as info:
        workflow_spec(place).prepare_input({"id": "a", "qty": "lots"})
    assert "place" in str(info.value) and "qty" in str(info.value)


def test_untyped_inputs_must_be_json():
    @workflow
    async def loose(inp): ...

    assert workflow_spec(loose).prepare_input({"a": [1, 2]})[1] == '{"a":[1,2]}'
    with pytest.raises(DuroError):
        workflow_spec(loose).prepare_input({"a": object()})


def test_definition_errors():
    with pytest.raises(ConfigError):
        workflow(lambda x: x)  # not async
    with pytest.raises(ConfigError):

        @workflow
        async def two(a, b): ...

    with pytest.raises(ConfigError):
        step(retries=-1)(lambda: 1)
    with pytest.raises(ConfigError):
        Concurrency(key="k", limit="three")
    with pytest.raises(ConfigError):
        Concurrency(key="k", limit=1, count_statuses=("sleeping",))


def test_steps_outside_a_run_are_plain_calls():
    @step(retries=2, retry_delay="1s")
    def add(a: int, b: int) -> int:
        return a + b

    assert add(2, 3) == 5
    assert Concurrency(key="k", limit=1, count_statuses=["running", RunStatus.PENDING]).count_statuses == (
        "running",
        "pending",
    )


async def test_starting_without_an_engine_says_how_to_get_one():
    @workflow
    async def lonely(n: int) -> int:
        return n

    with pytest.raises(DuroError, match="async with Engine"):
        await lonely.start(1)
    with pytest.raises(DuroError, match="duro_env"):
        await lonely.dispatch(1)
