"""A worker process for the crash tests: starts (or resumes) runs of ``fulfil`` and works forever."""

from __future__ import annotations

import asyncio
import sys

from duro import Engine, WorkerOptions
from tests.integration.flows import fulfil


async def main(url: str, run_id: str) -> None:
    async with Engine(url, options=WorkerOptions(poll_interval="100ms", lease="2s")) as engine:
        await fulfil.start({"name": "lamp", "qty": 2}, run_id=run_id, engine=engine)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
