"""A wait that a cancel pre-empts is dropped unstarted, with the waits it was handed: no coroutine is
left to warn "never awaited" when collected (warnings are errors in this suite)."""

from __future__ import annotations

import asyncio
import gc
import warnings

from duro.run._cancel import _discard


async def _wait_for(awaitable, deadline_ms):
    return await awaitable


async def test_a_dropped_wait_closes_the_event_wait_it_was_handed():
    event = asyncio.Event()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _discard(_wait_for(_wait_for(event.wait(), None), None))
        gc.collect()
    assert [str(w.message) for w in caught] == []


async def test_a_dropped_future_is_cancelled():
    future = asyncio.get_running_loop().create_future()
    _discard(future)
    assert future.cancelled()
