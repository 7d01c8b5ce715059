"""A chat turn: at most N turns of a tenant run at once, N from the tenant's plan.

The start of one turn too many is refused (ConcurrencyLimitError, which the app answers with a 429
and ``Retry-After``), not queued: the chat UI tells the user to wait for the reply in progress.
"""

from __future__ import annotations

from duro import Concurrency, step, wait_for_signal, workflow

PLAN_TURNS = {"free": 1, "team": 3}
TENANT_PLANS = {"globex": "team", "initech": "free"}


async def turns_for(key: str) -> int:
    """The quota's limit, read at every start from its key ("tenant:globex"); a real app reads the
    tenant's plan from its database here."""
    return PLAN_TURNS[TENANT_PLANS.get(key.removeprefix("tenant:"), "free")]


@step(retries=2, retry_delay="1s")
async def generate(message: str) -> str:
    return f"echo: {message}"  # the model call


@step
async def hold_room(conversation: str) -> str:
    return f"room held for {conversation}"  # the calendar API


@workflow(
    name="chat_turn",
    concurrency=Concurrency(key=lambda inp: f"tenant:{inp['tenant']}", limit=turns_for),
)
async def chat_turn(inp: dict) -> dict:
    tools = []
    if "book" in inp["message"]:
        tools.append(await hold_room(inp["conversation"]))
        # the user confirms the booking (POST /turns/{run_id}/confirm); meanwhile the turn is
        # suspended, and still counts against the tenant's quota
        if not await wait_for_signal("confirmed", timeout="10m"):
            return {"reply": "the booking was not confirmed in time", "tools_used": tools}
    return {"reply": await generate(inp["message"]), "tools_used": tools}
