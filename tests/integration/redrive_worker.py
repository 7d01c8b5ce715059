"""A worker process for the re-drive fault test: retries every failed run of ``faults.checkout``
(the fix deployed: ``DURO_TEST_FIXED=1``), then works forever."""

from __future__ import annotations

import asyncio
import sys

from duro import Engine, WorkerOptions
from tests.integration.redrive_flows import checkout


async def main(url: str) -> None:
    async with Engine(url, options=WorkerOptions(poll_interval="100ms", lease="2s")) as engine:
        engine.register(checkout)
        await engine.retry_runs(workflow="faults.checkout", limit=10_000)
        await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
