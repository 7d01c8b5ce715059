"""The voice-calls pair: one workflow takes a slot and places a call; another gives the slot back
when the provider's webhook says the call ended (``engine.emit("call.ended", payload)``)."""

from pydantic import BaseModel

from duro import SlotTimeoutError, acquire_slot, release_slot, step, workflow


class CallRequest(BaseModel):
    call_id: str
    to: str


class CallEnded(BaseModel):
    call_id: str
    slot_id: str
    seconds: int


@step(retries=2, retry_delay="2s")
async def dial(call_id: str, to: str, slot_id: str) -> str:
    # A real app calls the provider here, passing slot_id as call metadata: the provider sends it
    # back in its "call ended" webhook, which is how the other workflow knows what to release.
    return f"prov-{call_id}"


@workflow(name="place_call")
async def place_call(req: CallRequest) -> dict:
    try:
        slot = await acquire_slot("voice-calls", label=req.call_id, timeout="30m")
    except SlotTimeoutError:
        return {"call_id": req.call_id, "placed": False}
    provider_id = await dial(req.call_id, req.to, slot.id)
    # The run ends here while the call goes on: the slot stays held (a slot lives in the box, not
    # in the run) until call_ended releases it, or max_hold (45 m) takes it back.
    return {"call_id": req.call_id, "placed": True, "slot_id": slot.id, "provider_id": provider_id}


@workflow(name="call_ended", on_event="call.ended")
async def call_ended(event: CallEnded) -> bool:
    return (await release_slot(event.slot_id)).released
