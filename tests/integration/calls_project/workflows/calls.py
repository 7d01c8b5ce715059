"""Workflows whose inputs are the project's own classes: an app imports them to build inputs."""

from dataclasses import dataclass

from pydantic import BaseModel, Field

from duro import child, workflow


class Caller(BaseModel):
    name: str


class CallRequest(BaseModel):
    phone: str = Field(alias="Phone")
    caller: Caller
    cc: list[Caller] = []


@dataclass
class Callback:
    at: str
    caller: Caller


@workflow
async def place_call(inp: CallRequest) -> str:
    return f"{inp.caller.name} -> {inp.phone} (+{len(inp.cc)})"


@workflow
async def schedule_callback(inp: Callback) -> str:
    return f"{inp.caller.name} at {inp.at}"


@workflow
async def call_batch(inp: list[CallRequest]) -> list[str]:
    return [await child(place_call, request) for request in inp]
