"""``/api/events``: the live stream (server-sent events) Studio listens to."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ._common import RETRY_AFTER_S, error_response, source

PING_SECONDS = 15


async def events(request: Request) -> Response:
    hub = source(request).hub
    if hub.full:  # each stream holds a queue: beyond the cap, a clear 503 instead of memory
        return error_response(
            503,
            f"the server already serves {hub.subscribers} live event streams, its most: close another "
            f"Studio tab or event client, or retry in {RETRY_AFTER_S} s",
            {"Retry-After": str(RETRY_AFTER_S)},
            retry_after=RETRY_AFTER_S,
        )

    async def stream() -> AsyncIterator[ServerSentEvent]:
        with hub.subscribe() as queue:
            yield ServerSentEvent(event="hello", data=json.dumps({"subscribers": hub.subscribers}))
            while True:
                name, data = await queue.get()
                yield ServerSentEvent(event=name, data=json.dumps(data))

    return EventSourceResponse(stream(), ping=PING_SECONDS)


routes = [Route("/api/events", events, methods=["GET"])]
