"""Calls to a human agent: each takes one of the provider's phone lines for as long as it lasts.

``place_call`` waits for a free line (in a durable queue), dials, and stays on the line until the
provider's "call ended" webhook: the app starts ``call_ended``, which gives the line back and tells
the call it is over. A call the app cancels (the caller gave up) hangs up and gives its line to the
next caller at once. A tenant has at most two calls at a time: a third is refused, with a
``Retry-After`` of 30 s.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from duro import (
    Concurrency,
    RunCancelled,
    RunEndedError,
    acquire_slot,
    current_run,
    release_slot,
    send_signal,
    step,
    wait_for_signal,
    workflow,
)


class CallRequest(BaseModel):
    tenant: str = Field(min_length=1, max_length=100)
    call_id: str = Field(min_length=1, max_length=100)
    to: str = Field(pattern=r"^\+[0-9]{6,15}$")


class CallEnded(BaseModel):
    """The provider's webhook: it sends back the call's run id and slot id we gave it when dialling."""

    run_id: str
    slot_id: str
    seconds: int = Field(ge=0)


@step(retries=2, retry_delay="2s")
async def dial(call_id: str, to: str, run_id: str, slot_id: str) -> str:
    # A real app calls the provider here, with run_id and slot_id as the call's metadata: the
    # provider sends them back in its "call ended" webhook.
    return f"prov-{call_id}"


@step
async def hang_up(provider_id: str) -> None:
    return None  # the provider's hang-up call


@workflow(
    name="place_call",
    concurrency=Concurrency(key=lambda req: f"tenant:{req.tenant}", limit=2, retry_after="30s"),
)
async def place_call(req: CallRequest) -> dict:
    slot = await acquire_slot("phone-lines", label=req.call_id, timeout="30m")
    provider_id = None
    try:
        provider_id = await dial(req.call_id, req.to, current_run().id, slot.id)
        ended = await wait_for_signal("ended", timeout="45m")
    except RunCancelled:
        # the caller gave up: hang up, and the next caller gets the line now, not in 45 minutes
        if provider_id is not None:
            await hang_up(provider_id)
        await release_slot(slot.id)
        raise
    return {"call_id": req.call_id, "seconds": ended["seconds"] if ended else None}


@workflow(name="call_ended")
async def call_ended(event: CallEnded) -> bool:
    released = await release_slot(event.slot_id)  # a slot lives in the box: any workflow may free it
    try:
        await send_signal(event.run_id, "ended", {"seconds": event.seconds})
    except RunEndedError:
        pass  # the call was cancelled, and hung up, before the provider's webhook came
    return released.released
