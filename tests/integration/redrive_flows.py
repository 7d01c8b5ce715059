"""The workflow of the re-drive fault test: reserve (journaled), then charge, which fails until the
fix is deployed (``DURO_TEST_FIXED=1`` in the worker's environment)."""

from __future__ import annotations

import os

from duro import step, workflow


def _journal(line: str) -> None:
    path = os.environ.get("DURO_TEST_JOURNAL")
    if path:
        with open(path, "a", encoding="utf-8") as journal:  # one line a call, appended whole
            journal.write(f"{line} {os.getpid()}\n")


@step
async def reserve(order: str) -> str:
    _journal(f"reserve {order}")
    return f"stock for {order}"


@step
async def charge(order: str) -> str:
    if os.environ.get("DURO_TEST_FIXED") != "1":
        raise RuntimeError(f"the gateway refused {order}")
    _journal(f"charge {order}")
    return f"charged {order}"


@workflow(name="faults.checkout")
async def checkout(order: str) -> str:
    await reserve(order)
    return await charge(order)
