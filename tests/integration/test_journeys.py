"""The two journeys docs/architecture.md walks through cross exactly the files it lists.

A profiler records every function of the SDK (and of the dev server) called, in every thread, from
a point inside run A's code to a point inside run B's (or, for a start, from the HTTP request to the
workflow's code going on after its first step's record is committed). The files crossed
are compared with the list after "Files crossed" in the journey's section of the architecture page,
so the page stays true and a new file on either path is a decision, not an accident.
"""

from __future__ import annotations

import asyncio
import re
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import pytest

import duro
import duro_devserver
from duro import (
    Concurrency,
    Engine,
    Limit,
    WorkerOptions,
    acquire_slot,
    define_workspace,
    release_slot,
    step,
    workflow,
)
from duro_devserver.app import create_app
from duro_devserver.source import FixedEngine
from tests.support.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]
SDK = str(Path(duro.__file__).resolve().parent) + "/"
DEVSERVER = str(Path(duro_devserver.__file__).resolve().parent.parent) + "/"
PAGE = ROOT / "docs" / "architecture.md"
HEARTBEAT = SDK + "_heartbeat.py"
# nothing in the background between the two points: no poll, no heartbeat due, nothing evicted
QUIET = WorkerOptions(poll_interval="1h", lease="1h", evict_after=None)


class Journey:
    """The SDK functions called between ``begin`` and ``end``, as ``(file, function)`` pairs (and
    the dev server's, once ``roots`` names it)."""

    def __init__(self) -> None:
        self.recording = False
        self.roots = (SDK,)
        self.calls: set[tuple[str, str]] = set()

    def profile(self, frame: FrameType, event: str, arg: Any) -> None:
        if self.recording and event == "call":
            path = frame.f_code.co_filename
            for root in self.roots:
                if path.startswith(root) and not _in_heartbeat(frame):
                    self.calls.add((path[len(root) :], frame.f_code.co_name))

    @property
    def files(self) -> list[str]:
        return sorted({path for path, _ in self.calls})


def _in_heartbeat(frame: FrameType | None) -> bool:
    """Whether ``frame`` is the worker's heartbeat or called by it: the background, on no journey."""
    while frame is not None:
        if frame.f_code.co_filename == HEARTBEAT:
            return True
        frame = frame.f_back
    return False


async def quiet(engine: Engine) -> None:
    """Wait until the worker's first heartbeat is done (it beats as it starts, in its own thread,
    and a journey recorded meanwhile could find the store's write lock taken)."""
    heartbeat = engine._worker.heartbeat  # noqa: SLF001 - the test watches the background it excludes
    await eventually(lambda: heartbeat._beating is None, timeout=10, what="the first heartbeat")  # noqa: SLF001


@pytest.fixture
def journey() -> Iterator[Journey]:
    watch = Journey()
    threading.setprofile(watch.profile)  # the store's threads, started once the engine is entered
    sys.setprofile(watch.profile)
    try:
        yield watch
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def documented(section: str) -> list[str]:
    """The files listed after "Files crossed" in ``section`` of the architecture page."""
    text = PAGE.read_text()
    body = text[text.index(f"## {section}") :]
    match = re.search(r"Files crossed \((\d+)\): (.*?)\.\n", body[: body.find("\n## ", 3)], re.S)
    assert match, f"the section {section!r} of {PAGE.name} lists no 'Files crossed (N): ...'"
    files = re.findall(r"`([^`]+)`", match.group(2))
    assert int(match.group(1)) == len(files), f"{section!r}: the count before the list is not its length"
    return sorted(files)


CURRENT: dict[str, Journey] = {}


@step
async def first_step(n: int) -> int:
    return n


@workflow(concurrency=Concurrency(key=lambda inp: f"tenant:{inp}", limit=5))
async def quota_checked(n: int) -> int:
    result = await first_step(n)  # returns once its record is committed
    CURRENT["journey"].recording = False
    return result


async def test_an_http_start_to_its_first_step_committed(sqlite_url, journey):
    CURRENT["journey"] = journey
    journey.roots = (SDK, DEVSERVER)
    engine = Engine(sqlite_url, workspace=define_workspace(workflows=[]), options=QUIET)
    engine.register(quota_checked)
    app = create_app(FixedEngine(engine))
    async with app.router.lifespan_context(app):
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as client:
            path = "/api/workflows/quota_checked/runs"
            warm = await client.post(path, json={"input": 0})  # the first run of a process warms up
            await engine.handle(warm.json()["run"]["id"]).result()
            await quiet(engine)
            journey.recording = True
            answer = await client.post(path, json={"input": 1})
            await eventually(lambda: not journey.recording, timeout=10, what="the first step committed")
            assert answer.status_code == 201, answer.text
            assert (await engine.handle(answer.json()["run"]["id"]).result()) == 1
    assert journey.files == documented("The path of a start"), ", ".join(journey.files)


LINES = define_workspace(limits={"lines": Limit(capacity=1, max_hold="1h")})
GATE: dict[str, asyncio.Event] = {}


@workflow
async def holder(_: int) -> str:
    slot = await acquire_slot("lines")
    await GATE["release"].wait()
    CURRENT["journey"].recording = True
    await release_slot(slot.id)
    await GATE["finish"].wait()  # A's end is not on the journey
    return slot.id


@workflow
async def waiter(_: int) -> str:
    slot = await acquire_slot("lines")
    CURRENT["journey"].recording = False
    await release_slot(slot.id)
    return slot.id


async def test_a_slot_hand_off_from_release_to_the_waiter_resuming(sqlite_url, journey):
    CURRENT["journey"] = journey
    GATE["release"], GATE["finish"] = asyncio.Event(), asyncio.Event()
    async with Engine(sqlite_url, workspace=LINES, options=QUIET) as engine:
        engine.register(holder)
        engine.register(waiter)
        a = await engine.start(holder, 0)
        await eventually(lambda: _busy(engine, a.id), timeout=10, what="run A holding the slot")
        b = await engine.start(waiter, 0)
        await eventually(lambda: _queued(engine, b.id), timeout=10, what="run B in the queue")
        await quiet(engine)
        GATE["release"].set()
        await b.result()
        GATE["finish"].set()
        await a.result()
    assert not journey.recording
    assert journey.files == documented("The path of a slot hand-off"), ", ".join(journey.files)


async def _busy(engine: Engine, run_id: str) -> bool:
    return [s.run_id for s in await engine.limits.slots("lines") if s.state == "busy"] == [run_id]


async def _queued(engine: Engine, run_id: str) -> bool:
    return [s.run_id for s in await engine.limits.slots("lines") if s.state == "waiting"] == [run_id]
