"""The simulated environment: a project's engine on a fresh SQLite store and a simulated clock.

``async with simulated(project) as env:`` (or the ``duro_env`` pytest fixture) gives an engine whose
time moves only when the test says so. ``advance`` fires every due timer in time order and lets the
runs progress fully between timers; ``restart`` simulates the machine dying and coming back.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import sqlite3
from collections.abc import Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from duro import BulkReport, ConfigError, Engine, RunHandle, RunStatus, WorkerOptions, define_workspace
from duro.testing import EngineCrash, EngineHooks
from duro.testing import hooks as engine_hooks
from duro.tooling import (
    ReplayOutcome,
    RunEvent,
    datetime_to_ms,
    duration_ms,
    history_from_json,
    load_project,
    ms_to_datetime,
)

from ._clock import DEFAULT_START, SimulatedClock, settle
from ._frozen import FrozenTime

_ENVIRONMENTS = itertools.count(1)  # names the in-memory store of each environment in this process
_YOUNG_OBJECTS = 200_000  # allocations between the young collections of an advance (see advance_to)
_STEP_POLL_S = 0.001  # how often, in real time, the harness looks whether steps doing real I/O ended


class _CurrentEngine:
    """What the environment's handles call (``duro.client._handle.RunAccess``): whichever engine runs now,
    so handles survive ``restart()``."""

    def __init__(self, env: DuroEnv) -> None:
        self._env = env

    async def get_run(self, run_id: str) -> Any:
        return await self._env.engine.get_run(run_id)

    async def steps(self, run_id: str) -> Any:
        return await self._env.engine.steps(run_id)

    async def cancel(self, run_id: str) -> None:
        await self._env.engine.cancel(run_id)

    async def signal(self, run_id: str, name: str, payload: Any = None) -> None:
        await self._env.engine.signal(run_id, name, payload)

    async def retry(self, run_id: str, *, version: str | None = None) -> RunHandle:
        return await self._env.engine.retry(run_id, version=version)

    async def fork(
        self, run_id: str, from_seq: int, *, new_run_id: str | None = None, version: str | None = None
    ) -> RunHandle:
        return await self._env.engine.fork(run_id, from_seq, new_run_id=new_run_id, version=version)

    async def result(self, run_id: str, timeout: Any = None) -> Any:
        """Under simulated time nothing moves while a test waits, so a run that has not finished once
        every runnable run settled, and no step is executing, never will: say so instead of hanging."""
        env = self._env
        await env.run_until_idle()
        info = await env.engine.get_run(run_id)
        if not info.status.terminal and env.executing_steps():
            # a step awaiting real I/O, or a run waiting on such a step: wait for them, bounded

            async def ended() -> bool:
                return (await env.engine.get_run(run_id)).status.terminal

            await env.wait_for_steps(ended, f"run {run_id} to finish")
            await env.run_until_idle()
            info = await env.engine.get_run(run_id)
        if not info.status.terminal:
            raise AssertionError(
                f"run {run_id} has not finished: it is {info.status.value} at {env.now.isoformat()} "
                f"(simulated); advance time (await env.advance(...)) or send the signal it waits for first"
            )
        return await env.engine.result(run_id, timeout)


class DuroEnv:
    """A project under simulated time: its engine on a fresh store and a simulated clock (docs/testing.md)."""

    def __init__(
        self,
        project: str | Path | None = None,
        start: datetime | str | None = None,
        config: Mapping[str, Any] | None = None,
        directory: str | Path | None = None,
        max_resident_runs: int = 10_000,
        io_timeout: float = 30.0,
    ) -> None:
        self.project_dir = None if project is None else Path(project).resolve()
        self.start_instant = _instant(start) if start is not None else DEFAULT_START
        self.config = dict(config or {})
        unknown = set(self.config) - {"limits", "rates", "retention"}
        if unknown:
            raise ConfigError(
                f"duro harness config: unknown key(s) {', '.join(sorted(unknown))}; "
                f"only 'limits', 'rates' and 'retention' can be overridden"
            )
        self._directory = None if directory is None else Path(directory)
        self.io_timeout = io_timeout  # seconds of real time a step awaiting real I/O may take
        # 0: every waiting run leaves memory at once and is replayed from the store when its wait
        # ends, as a production worker does with runs that wait long (see WorkerOptions)
        self.options = WorkerOptions(
            poll_interval=None, evict_after=None, max_resident_runs=max_resident_runs
        )
        self._memory_name = f"duro-harness-{next(_ENVIRONMENTS)}"
        self._keeper: sqlite3.Connection | None = None  # keeps the in-memory store alive across restarts
        self.clock = SimulatedClock(self.start_instant)
        self.events: list[RunEvent] = []
        self.restarts = 0
        self._engine: Engine | None = None
        self._hooks = EngineHooks()  # the running engine's (see _start_engine)
        self._engine_ref = _CurrentEngine(self)
        self._ids = itertools.count(1)
        self._freezer: FrozenTime | None = None
        self._crash_points: dict[str, int] = {}
        self._crash_pending = False
        self._down_for: str | int | timedelta = 0
        self._project: Any = None

    # -- lifecycle -------------------------------------------------------------------------------

    async def __aenter__(self) -> DuroEnv:
        self._project = load_project(self.project_dir) if self.project_dir is not None else None
        self._freezer = FrozenTime(self.clock.now)
        self._freezer.start()
        self.clock.listeners.append(self._move_frozen_time)
        try:
            if self._directory is None:
                self._keeper = sqlite3.connect(f"file:{self._memory_name}?mode=memory&cache=shared", uri=True)
            await self._start_engine()
        except BaseException:
            self._release()  # time unfrozen and the store gone, as after a normal exit
            raise
        return self

    async def __aexit__(self, *exc: Any) -> None:
        try:
            if self._engine is not None:
                await self._engine.__aexit__(*exc)
        finally:
            self._release()

    def _release(self) -> None:
        if self._move_frozen_time in self.clock.listeners:
            self.clock.listeners.remove(self._move_frozen_time)
        if self._freezer is not None:
            self._freezer.stop()
            self._freezer = None
        if self._keeper is not None:
            self._keeper.close()
            self._keeper = None

    def _move_frozen_time(self, instant_ms: int) -> None:
        if self._freezer is not None:
            self._freezer.move_to(ms_to_datetime(instant_ms))

    def _workspace(self) -> Any:
        base = self._project.workspace if self._project is not None else define_workspace()
        overrides, rate_overrides = self.config.get("limits"), self.config.get("rates")
        if not overrides and not rate_overrides and "retention" not in self.config:
            return base
        limits: dict[str, Any] = {
            name: {"capacity": lim.capacity, "max_hold": lim.max_hold_ms}
            | ({} if lim.per_key is None else {"per_key": lim.per_key})
            for name, lim in base.limits.items()
        }
        limits.update(overrides or {})
        rates: dict[str, Any] = {
            name: {"limit": rate.limit, "per": rate.per_ms, "per_key": rate.per_key}
            for name, rate in base.rates.items()
        }
        rates.update(rate_overrides or {})
        retention = self.config["retention"] if "retention" in self.config else base.retention_ms
        return replace(
            define_workspace(limits=limits, rates=rates, retention=retention), workflows=base.workflows
        )

    def _database_url(self) -> str:
        """A fresh SQLite store: in memory (its rows never reach a file, which saves a third of their
        cost), or a file in ``directory`` when the test wants to look at it afterwards."""
        if self._directory is not None:
            return f"sqlite:///{self._directory / 'duro.db'}?synchronous=OFF"
        return f"sqlite:///file:{self._memory_name}?mode=memory&cache=shared&uri=true"

    async def _start_engine(self) -> None:
        engine = Engine(
            self._database_url(),
            workspace=self._workspace(),
            clock=self.clock,
            options=self.options,
        )
        hooks = engine_hooks(engine)  # how the harness drives the engine (duro._hooks.EngineHooks)
        hooks.inline_store = True  # deterministic: the loop does all the work (see _clock.settle)
        hooks.inline_sync_steps = True
        hooks.executing = []  # the async steps executing now (see wait_for_steps)
        hooks.new_run_id = lambda: f"run-{next(self._ids):05d}"
        hooks.handle_target = self._engine_ref  # handles from Workflow.start survive restart() too
        hooks.checkpoints.append(self._checkpoint)
        hooks.grant_locally = "slot.confirming" not in self._crash_points
        for spec in self._project.workflows if self._project is not None else ():
            engine.register(spec)
        if self._engine is not None:  # keep what the test registered by hand
            for spec in self._engine.workflows.values():
                if spec.name not in engine.workflows:
                    engine.register(spec)
        engine.events.subscribe(self.events.append)
        self._engine, self._hooks = engine, hooks
        await engine.__aenter__()

    # -- the engine ------------------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise RuntimeError(
                "the duro environment is not running: use it inside `async with simulated(...)` "
                "or in an `async def` test taking the duro_env fixture"
            )
        return self._engine

    @property
    def now(self) -> datetime:
        """The simulated time (an aware UTC datetime)."""
        return self.clock.now

    async def start(self, workflow: Any, inp: Any = None, **start_options: Any) -> RunHandle:
        """Create a run (``run_id=``, ``concurrency=`` as on ``engine.start``) and return its handle.
        The run progresses when the test awaits ``run_until_idle()`` or ``advance(...)``."""
        return await self.engine.start(workflow, inp, **start_options)  # its handle survives restart()

    async def retry(self, run: RunHandle | str, *, version: str | None = None) -> RunHandle:
        """Retry a failed or cancelled run from its failing call (``engine.retry``); it goes on when
        the test awaits ``run_until_idle()`` or ``advance(...)``."""
        return await self.engine.retry(_run_id(run), version=version)

    async def fork(
        self,
        run: RunHandle | str,
        from_seq: int,
        *,
        new_run_id: str | None = None,
        version: str | None = None,
    ) -> RunHandle:
        """A new run from a copy of an ended run's calls before ``from_seq`` (``engine.fork``)."""
        return await self.engine.fork(_run_id(run), from_seq, new_run_id=new_run_id, version=version)

    async def retry_runs(self, **filters: Any) -> BulkReport:
        """Retry the runs a filter matches (``engine.retry_runs``: workflow, status, since, until,
        error_type, dry_run, limit)."""
        return await self.engine.retry_runs(**filters)

    async def cancel_runs(self, **filters: Any) -> BulkReport:
        """Cancel the unfinished runs a filter matches (``engine.cancel_runs``)."""
        return await self.engine.cancel_runs(**filters)

    def handle(self, run_id: str) -> RunHandle:
        """A handle that stays usable across ``restart()``."""
        return self.engine.handle(run_id)  # bound to whichever engine runs, like every handle here

    # -- time ------------------------------------------------------------------------------------

    async def run_until_idle(self) -> None:
        """Let every runnable run proceed until all wait on time or on outside input. A step awaiting
        real I/O (a real timer or a socket: ``asyncio.sleep``, a local HTTP call) is waited for in real
        time, up to ``io_timeout`` seconds."""
        while True:
            await settle()
            if self._hooks.executing and _awaiting_real_io():

                async def quiet() -> bool:
                    return not _awaiting_real_io()

                await self.wait_for_steps(quiet, "the runs to settle")
            if not self._crash_pending:
                return
            self._crash_pending = False
            await self.restart(self._down_for)

    def executing_steps(self) -> list[tuple[str, str]]:
        """``(run id, step name)`` of each async step whose body is executing now."""
        return list(self._hooks.executing or ())

    async def wait_for_steps(self, done: Callable[[], Awaitable[bool]], what: str) -> None:
        """Wait in real time, letting the runs progress, until ``done()`` or no step is executing; an
        AssertionError naming the steps once ``io_timeout`` seconds have passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.io_timeout  # the loop keeps real time under freezegun
        while self._hooks.executing and not await done():
            if loop.time() >= deadline:
                steps = ", ".join(f"step {name!r} of run {run_id}" for run_id, name in self.executing_steps())
                raise AssertionError(
                    f"waited {self.io_timeout:g}s of real time for {what}, but {steps} still executes: "
                    f"a step awaiting real I/O must end by itself (allow it longer with "
                    f"@pytest.mark.duro(io_timeout=...) or DuroEnv(io_timeout=...)), and one awaiting "
                    f"something the test sets needs the test to set it first"
                )
            await asyncio.sleep(_STEP_POLL_S)
            await settle()

    async def advance(self, duration: str | int | timedelta) -> None:
        """Move time forward, firing every due timer in time order with the runs settling between."""
        await self.advance_to(self.clock.now_ms() + duration_ms(duration, "advance"))

    async def advance_to(self, instant: datetime | str | int) -> None:
        target = instant if isinstance(instant, int) else datetime_to_ms(_instant(instant))
        if target < self.clock.now_ms():
            raise ValueError(f"cannot advance to {ms_to_datetime(target)}: it is before now ({self.now})")
        # A long advance creates many objects that live on (every step's record, every event), so
        # the collector's automatic passes would re-scan a growing heap every few thousand wake-ups
        # while finding nothing: they are off for the advance, which collects the young generations
        # itself between timers once enough was allocated (short-lived cycles still go).
        collecting = gc.isenabled()
        gc.disable()
        try:
            await self.clock.advance_to(target, idle=self._between_timers)
        finally:
            if collecting:
                gc.enable()

    async def _between_timers(self) -> None:
        await self.run_until_idle()
        if gc.get_count()[0] > _YOUNG_OBJECTS:
            gc.collect(1)

    # -- replay ----------------------------------------------------------------------------------

    async def replay(self, history: Any) -> ReplayOutcome:
        """Replay a recorded history (what ``duro runs export`` writes: its JSON text, the parsed
        object, or a path to the file) on the code registered here, executing no step body and
        writing nothing. ``.diverged`` says whether the code would fail the run; ``.seq``,
        ``.recorded`` and ``.asked`` say where and how."""
        if isinstance(history, Path):
            history = history.read_text()
        run, steps = history_from_json(history)
        return await self.engine.replay_history(run, steps)

    # -- restarts --------------------------------------------------------------------------------

    async def restart(self, down_for: str | int | timedelta = 0) -> None:
        """Simulate a machine restart: in-memory tasks, futures and caches are dropped, the dead worker is
        found dead, and a fresh engine recovers every unfinished run from the store. ``down_for``:
        how long the machine stays down (time passes with no engine: reservations lapse, say)."""
        old = self.engine
        dead_worker = old.worker.id if old.worker is not None else None
        await old.abandon()
        if dead_worker is not None:
            old.store.workers.remove(dead_worker, self.clock.now_ms(), True)
        self.restarts += 1
        self.clock.set(self.clock.now_ms() + duration_ms(down_for, "down_for"))
        await self._start_engine()
        await settle()

    def crash_at(self, point: str, occurrence: int = 1, down_for: str | int | timedelta = 0) -> None:
        """Make the machine die the ``occurrence``-th time the engine reaches ``point`` (then restart
        it at once): e.g. ``"step.executed"`` — a step's function returned but its result is not
        recorded yet —, ``"run.finishing"`` — the output is computed but not stored — or
        ``"slot.confirming"`` — a slot was handed to a waiting run, which has not confirmed it yet.
        ``down_for``: how long the machine stays down before it restarts.

        While ``"slot.confirming"`` is armed, a release hands slots out as reservations even to runs
        waiting in this engine (which otherwise take them in the release's own transaction, leaving
        nothing to confirm), so that the crash has a reservation to strand."""
        self._crash_points[point] = occurrence
        self._down_for = down_for
        if point == "slot.confirming" and self._engine is not None:
            self._hooks.grant_locally = False

    def _checkpoint(self, point: str, run_id: str) -> None:
        left = self._crash_points.get(point)
        if left is None:
            return
        if left > 1:
            self._crash_points[point] = left - 1
            return
        del self._crash_points[point]
        self._crash_pending = True
        raise EngineCrash(f"simulated crash at {point} in run {run_id}")

    # -- assertions that read well ---------------------------------------------------------------

    async def status(self, run: RunHandle | str) -> RunStatus:
        return await self.engine.handle(_run_id(run)).status()

    async def steps(self, run: RunHandle | str) -> list[tuple[str, str]]:
        """``(name, status)`` of each durable call of the run, in sequence order."""
        return [(s.name, s.status) for s in await self.engine.steps(_run_id(run))]

    async def assert_status(self, run: RunHandle | str, status: str) -> None:
        actual = await self.status(run)
        assert actual == status, (
            f"run {_run_id(run)} is {actual}, expected {status} (at {self.now.isoformat()})"
        )

    async def assert_steps(self, run: RunHandle | str, *names: str) -> None:
        actual = [name for name, _ in await self.steps(run)]
        assert actual == list(names), f"run {_run_id(run)} made calls {actual}, expected {list(names)}"

    async def busy(self, limit: str) -> list[str | None]:
        """The runs holding a slot of ``limit`` (busy or reserved), oldest grant first."""
        return [s.run_id for s in await self.engine.limits.slots(limit) if s.state != "waiting"]

    async def queue(self, limit: str, key: str | None = None) -> list[str | None]:
        """The runs waiting for a slot of ``limit`` (of ``key``'s alone, on a keyed limit), in queue
        order."""
        return [s.run_id for s in await self.engine.limits.slots(limit, key=key) if s.state == "waiting"]

    async def assert_limit(self, limit: str, busy: int, waiting: int, key: str | None = None) -> None:
        """``limit`` has ``busy`` slots busy or reserved and ``waiting`` runs in its queue (of
        ``key``'s alone, on a keyed limit)."""
        if key is None:
            (info,) = [i for i in await self.engine.limits.list() if i.name == limit]
            actual = (info.busy + info.reserved, info.waiting)
        else:
            slots = await self.engine.limits.slots(limit, key=key)
            actual = (
                sum(1 for s in slots if s.state in ("busy", "reserved")),
                sum(1 for s in slots if s.state == "waiting"),
            )
        of = f"limit {limit}" if key is None else f"limit {limit}, key {key!r}"
        assert actual == (busy, waiting), (
            f"{of}: {actual[0]} busy and {actual[1]} waiting, expected "
            f"{busy} and {waiting} (at {self.now.isoformat()})"
        )

    async def assert_rate(
        self,
        name: str,
        waiting: int | None = None,
        key: str | None = None,
        granted: int | None = None,
        paused: bool | None = None,
    ) -> None:
        """Rate ``name`` (``key``'s queue alone, on a keyed rate) has ``waiting`` runs in its queue,
        ``granted`` costs granted in the window ending now, and is ``paused`` or not; each check
        only when given."""
        if key is None:
            info = await self.engine.rates.info(name)
            actual = (info.waiting, info.granted, info.paused_until is not None)
        else:
            used, queued, until = await self.engine.rates.key_use(name, key)
            actual = (queued, used, until is not None)
        expected = (waiting, granted, paused)
        of = f"rate {name}" if key is None else f"rate {name}, key {key!r}"
        for field, got, want in zip(("waiting", "granted", "paused"), actual, expected, strict=True):
            assert want is None or got == want, (
                f"{of}: {field} is {got}, expected {want} (at {self.now.isoformat()})"
            )

    def timeline(self) -> list[tuple[str, str, str, str]]:
        """The events so far as ``(time, kind, run id, name)``: identical for identical scenarios."""
        return [
            (
                ms_to_datetime(e.at).isoformat(),
                e.kind,
                e.run_id,
                str(e.detail.get("name", e.workflow or "")),
            )
            for e in self.events
        ]


def _awaiting_real_io() -> bool:
    """Whether the loop waits on the real world: a timer (``asyncio.sleep``, a timeout) or a socket.
    The engine under the harness waits on neither (its clock is simulated, its store in memory)."""
    loop = asyncio.get_running_loop()
    scheduled = getattr(loop, "_scheduled", None)
    selector = getattr(loop, "_selector", None)
    if scheduled is None or selector is None:
        return True  # a loop of another kind: assume so (the wait is bounded)
    wakeup = 1 if getattr(loop, "_ssock", None) is not None else 0  # the loop's own self-pipe
    return any(not timer.cancelled() for timer in scheduled) or len(selector.get_map()) > wakeup


def _run_id(run: RunHandle | str) -> str:
    return run if isinstance(run, str) else run.id


def _instant(value: datetime | str) -> datetime:
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return ms_to_datetime(datetime_to_ms(value))


@asynccontextmanager
async def simulated(
    project: str | Path | None = None,
    start: datetime | str | None = None,
    config: Mapping[str, Any] | None = None,
    directory: str | Path | None = None,
    max_resident_runs: int = 10_000,
    io_timeout: float = 30.0,
) -> Any:
    """``async with simulated("path/to/project") as env:`` — the harness without pytest."""
    async with DuroEnv(
        project,
        start=start,
        config=config,
        directory=directory,
        max_resident_runs=max_resident_runs,
        io_timeout=io_timeout,
    ) as env:
        yield env
