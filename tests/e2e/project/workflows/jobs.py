"""Workflows the end-to-end tests drive through the CLI, the API and Studio."""

from pathlib import Path

from pydantic import BaseModel

from duro import Concurrency, acquire_rate, acquire_slot, release_slot, step, wait_for_signal, workflow


class Greeting(BaseModel):
    name: str
    times: int = 1


@step
async def shout(name: str, times: int) -> str:
    return " ".join([f"hello {name}"] * times)


@workflow(name="greet")
async def greet(req: Greeting) -> str:
    return await shout(req.name, req.times)


@workflow(name="hold", concurrency=Concurrency(key=lambda inp: inp["tenant"], limit=2))
async def hold(inp: dict) -> str:
    """Take the partner API's session, keep it until the signal "done", then give it back."""
    slot = await acquire_slot("partner-api", label=f"job {inp['job']}", timeout="1h")
    await wait_for_signal("done")
    await release_slot(slot.id)
    return f"job {inp['job']} done"


@workflow(name="call")
async def call(job: str) -> str:
    """One call to the partner API: at most 2 a minute."""
    await acquire_rate("partner-calls", timeout="1h")
    return f"called {job}"


# While this file exists, the payment gateway refuses every charge: a test "deploys the fix" by
# removing it (it sits in the project's .duro folder, which the dev server does not watch).
GATEWAY_DOWN = Path(__file__).resolve().parent.parent / ".duro" / "gateway-down"


class PaymentGatewayError(Exception):
    pass


@step
async def reserve(order: str) -> str:
    return f"stock for {order}"


@step
async def charge_card(order: str) -> str:
    if GATEWAY_DOWN.exists():
        raise PaymentGatewayError(f"the gateway refused {order}")
    return f"charged {order}"


@workflow(name="checkout")
async def checkout(order: str) -> str:
    """Reserve the stock, then charge the card (failed while the gateway is down)."""
    stock = await reserve(order)
    paid = await charge_card(order)
    return f"{stock}, {paid}"
