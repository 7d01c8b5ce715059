"""The live stream has a cap: past ``MAX_SUBSCRIBERS`` streams at once, ``GET /api/events`` is a
503 with ``Retry-After`` saying why, instead of one more queue of events held in memory."""

from __future__ import annotations

from contextlib import ExitStack

import httpx

from duro import Engine, define_workspace
from duro_devserver.app import create_app
from duro_devserver.source import MAX_SUBSCRIBERS, FixedEngine


async def test_past_the_cap_a_new_stream_is_refused_with_a_clear_503(tmp_path):
    engine = Engine(f"sqlite:///{tmp_path / 'duro.db'}", workspace=define_workspace(workflows=[]))
    source = FixedEngine(engine)
    app = create_app(source)
    async with app.router.lifespan_context(app):
        with ExitStack() as streams:
            while source.hub.subscribers < MAX_SUBSCRIBERS:  # the server's own count too
                streams.enter_context(source.hub.subscribe())
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8787") as client:
                refused = await client.get("/api/events")
        assert refused.status_code == 503
        assert refused.headers["retry-after"] == "5"
        assert f"{MAX_SUBSCRIBERS} live event streams" in refused.json()["message"]
        assert source.hub.subscribers < MAX_SUBSCRIBERS  # the streams closed: a new one would be served
