"""The dev server's project: loads ``duro.config.py`` and ``workflows/``, runs an engine on the
project's store, and reloads on every saved change.

A reload imports the project afresh; when that works, the running engine stops (its in-flight runs
are handed back to the store) and a new engine with the new code starts and recovers them at once:
running and waiting runs survive every reload, and a step that was executing when the reload came is
executed again (steps are at-least-once, as after any crash). When the import fails, the previous
engine keeps running the last good code (if none ever loaded, the server waits for a fix), and the
error (with its traceback) is printed in the terminal and shown in Studio until a later save fixes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import watchfiles

from duro import Engine
from duro.metrics import Meter
from duro.tooling import load_project, ms_to_datetime

from .logs import log
from .source import Hub, ProjectUnavailable, describe_load_error, print_load_error

IGNORED_DIRS = {".duro", "__pycache__", ".venv", "venv", "tests", "node_modules", ".git", ".pytest_cache"}
WATCH_DEBOUNCE_MS = 50  # changes closer together than this make one reload


def watched(path: str, root: Path) -> bool:
    """Whether a change to ``path`` reloads the project: ``duro.config.py`` and any ``.py`` file of
    the project outside tests, virtual environments and duro's own ``.duro`` directory."""
    try:
        parts = Path(path).resolve().relative_to(root).parts
    except ValueError:
        return False
    return bool(parts) and parts[-1].endswith(".py") and not IGNORED_DIRS.intersection(parts[:-1])


class DevProject:
    """A project directory served by ``duro dev``: the current engine, reloads, and their errors."""

    def __init__(
        self,
        root: str | Path,
        database_url: str | None = None,
        *,
        watch: bool = True,
        engine_options: dict[str, Any] | None = None,
    ) -> None:
        self.root = Path(root).resolve()
        self.database_url = database_url or f"sqlite:///{self.root / '.duro' / 'dev.db'}"
        self.watch = watch
        self.hub = Hub()
        self.meter = Meter()  # attached to each engine in turn: counters never go back on a reload
        self._detach_meter: Callable[[], None] | None = None
        self.reloads = 0
        self.load_error: dict[str, str] | None = None
        self.loaded_at: int | None = None
        self._engine: Engine | None = None
        self._engine_options = engine_options or {}
        self._unsubscribe: Any = None
        self._lock = asyncio.Lock()
        self._watcher: asyncio.Task[None] | None = None
        self._stop_watching = asyncio.Event()

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            raise ProjectUnavailable(
                self.load_error or {"message": "the project is not loaded yet", "traceback": ""}
            )
        return self._engine

    def status(self) -> dict[str, Any]:
        loaded = None if self.loaded_at is None else ms_to_datetime(self.loaded_at).isoformat()
        return {
            "project": str(self.root),
            "database": self.database_url,
            "loaded_at": loaded,
            "load_error": self.load_error,
            "reloads": self.reloads,
        }

    async def start(self) -> None:
        await self.reload()
        if self.watch:
            self._watcher = asyncio.get_running_loop().create_task(self._watch(), name="duro-dev-watch")

    async def stop(self) -> None:
        self._stop_watching.set()
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)
        async with self._lock:
            await self._retire(self._engine)
            self._engine = None

    async def reload(self) -> bool:
        """Load the project afresh and swap engines; False (the old engine keeps running) on an error."""
        async with self._lock:
            try:
                project = load_project(self.root, fresh=True)
                engine = Engine(self.database_url, workspace=project.workspace, **self._engine_options)
                for spec in project.workflows:
                    engine.register(spec)
            except Exception as err:  # noqa: BLE001 - any error in user code must not stop the server
                self.load_error = describe_load_error(err)
                print_load_error(self.load_error, running=self._engine is not None)
                self.hub.publish("reload", {"ok": False, "error": self.load_error, "reloads": self.reloads})
                return False
            await self._retire(self._engine)
            self._detach_meter = self.meter.attach(engine)  # before it starts: recovery grants count
            try:
                await engine.__aenter__()
            except BaseException:
                self._detach_meter()
                self._detach_meter = None
                raise
            self._unsubscribe = engine.events.subscribe(self.hub.forward)
            self._engine = engine
            self.load_error = None
            self.loaded_at = engine.clock.now_ms()
            self.reloads += 1
            names = ", ".join(sorted(engine.workflows)) or "none"
            log.info("loaded %s (workflows: %s)", self.root, names, extra={"event": "project.loaded"})
            self.hub.publish("reload", {"ok": True, "error": None, "reloads": self.reloads})
            return True

    async def _retire(self, engine: Engine | None) -> None:
        if engine is None:
            return
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        await engine.__aexit__(None, None, None)
        if self._detach_meter is not None:  # after the engine stopped: all it did is counted
            self._detach_meter()
            self._detach_meter = None

    async def _watch(self) -> None:
        async for changes in watchfiles.awatch(
            self.root,
            watch_filter=lambda _change, path: watched(path, self.root),
            debounce=WATCH_DEBOUNCE_MS,
            step=WATCH_DEBOUNCE_MS,
            stop_event=self._stop_watching,
        ):
            names = sorted({Path(path).name for _, path in changes})
            log.info("%s changed; reloading", ", ".join(names), extra={"event": "project.changed"})
            await self.reload()
