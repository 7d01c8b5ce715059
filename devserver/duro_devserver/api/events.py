"""``/api/events``: the live stream (server-sent events) Studio listens to."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.routing import Route

from ._common import source

PING_SECONDS = 15


async def events(request: Request) -> EventSourceResponse:
    hub = source(request).hub

    async def stream() -> AsyncIterator[ServerSentEvent]:
        with hub.subscribe() as queue:
            yield ServerSentEvent(event="hello", data=json.dumps({"subscribers": hub.subscribers}))
            while True:
                name, data = await queue.get()
                yield ServerSentEvent(event=name, data=json.dumps(data))

    return EventSourceResponse(stream(), ping=PING_SECONDS)


routes = [Route("/api/events", events, methods=["GET"])]
