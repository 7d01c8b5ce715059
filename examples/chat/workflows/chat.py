"""A chat turn: at most N turns per tenant execute at once, N from the tenant's plan.

The 9th concurrent turn of an enterprise tenant is refused at start (ConcurrencyLimitError; HTTP
429 from the dev server), not queued: the caller tells the user to wait or retries later.
"""

from pydantic import BaseModel

from duro import Concurrency, sleep, step, wait_for_signal, workflow

from .plans import turns_for


class TurnInput(BaseModel):
    tenant_id: str
    conversation_id: str
    message: str


class TurnOutput(BaseModel):
    reply: str
    tools_used: list[str]


@step(retries=2, retry_delay="1s")
async def generate(inp: TurnInput) -> str:
    return f"echo: {inp.message}"


@step
async def call_tool(name: str, conversation_id: str) -> str:
    return f"{name} ok"


@workflow(
    name="chat.turn", concurrency=Concurrency(key=lambda inp: f"tenant:{inp.tenant_id}", limit=turns_for)
)
async def chat_turn(inp: TurnInput) -> TurnOutput:
    tools = []
    if "book" in inp.message:
        tools.append(await call_tool("calendar", inp.conversation_id))
        # a human confirms the booking; the turn is "suspended" meanwhile and still counts
        await wait_for_signal("confirmed", timeout="10m")
    await sleep("2s")  # streaming the reply, say
    return TurnOutput(reply=await generate(inp), tools_used=tools)
