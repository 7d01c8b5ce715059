"""``create_app``: the Starlette app of the dev server and ``duro serve``: the HTTP API and Studio.

No module-level state: everything the app needs hangs off ``app.state`` (its engine source, the
limits monitor, whether a token is required, the Prometheus registry that ``GET /metrics`` reads).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from pathlib import Path

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from duro import DuroError, Engine
from duro.metrics import collector

from .api import api_routes
from .api._common import (
    ApiError,
    duro_error,
    error_response,
    store_down,
    store_down_errors,
    unavailable_response,
)
from .monitor import LimitsMonitor
from .security import Guard
from .source import EngineSource, FixedEngine, ProjectUnavailable

STUDIO_DIR = Path(__file__).parent / "studio"


def create_app(
    source: Engine | EngineSource, *, token: str | None = None, allowed_hosts: Iterable[str] = ()
) -> Starlette:
    """The app for ``source``: an :class:`Engine` (entered, i.e. executing runs, while the app runs)
    or an engine source such as the dev server's reloading project. ``token``: require it on every
    API call. ``allowed_hosts``: the names requests may give as their ``Host`` besides ``localhost``
    and the address they arrive on (``duro dev`` passes ``--host`` and every ``--allow-host``;
    in-process test clients, whose Host is ``testserver``, need none). See :mod:`.security`."""
    engine_source: EngineSource = FixedEngine(source) if isinstance(source, Engine) else source
    monitor = LimitsMonitor(engine_source)
    registry = CollectorRegistry()
    registry.register(collector(lambda: engine_source.engine, meter=engine_source.meter))

    @asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        await engine_source.start()
        monitor.start()
        try:
            yield
        finally:
            await monitor.stop()
            await engine_source.stop()

    routes = [
        *api_routes(),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/", studio_index, methods=["GET"]),
    ]
    if STUDIO_DIR.is_dir():
        routes.append(Mount("/studio", StaticFiles(directory=STUDIO_DIR), name="studio"))
    handlers = {
        ApiError: _api_error,
        ProjectUnavailable: _unavailable,
        DuroError: _duro_error,
        HTTPException: _http_error,
        **dict.fromkeys(store_down_errors(), _store_down),
    }
    guard = Middleware(Guard, token=token, allowed_hosts=list(allowed_hosts))
    app = Starlette(routes=routes, lifespan=lifespan, middleware=[guard], exception_handlers=handlers)
    app.state.source = engine_source
    app.state.monitor = monitor
    app.state.token_required = token is not None
    app.state.metrics_registry = registry
    return app


async def metrics(request: Request) -> Response:
    """Prometheus text exposition of the app's registry: the limits' gauges of the current engine's
    store (a read, so off the event loop) and the counters of every engine the source has run."""
    registry: CollectorRegistry = request.app.state.metrics_registry
    body = await run_in_threadpool(generate_latest, registry)
    return Response(body, headers={"Content-Type": CONTENT_TYPE_LATEST})


async def studio_index(_request: Request) -> Response:
    index = STUDIO_DIR / "index.html"
    if index.is_file():
        return FileResponse(index, headers={"Cache-Control": "no-cache"})
    return HTMLResponse("<h1>duro</h1><p>Studio is not installed here; the API is at /api/.</p>")


async def _api_error(_request: Request, err: Exception) -> Response:
    assert isinstance(err, ApiError)
    down = store_down(err.__context__)  # a "no such run" that was really "no answer from the store"
    if down is not None:
        return unavailable_response(down)
    return error_response(err.status, err.message, err.headers, **err.extra)


async def _store_down(_request: Request, err: Exception) -> Response:
    """The store did not answer (StoreUnavailable, or a driver's error that escaped it): 503 with
    Retry-After, never a 500 with SQL and a traceback."""
    return unavailable_response(err)


async def _unavailable(_request: Request, err: Exception) -> Response:
    assert isinstance(err, ProjectUnavailable)
    return error_response(503, f"the project failed to load, fix it and save: {err.error['message']}")


async def _duro_error(_request: Request, err: Exception) -> Response:
    down = store_down(err.__context__)
    if down is not None:
        return unavailable_response(down)
    assert isinstance(err, DuroError)
    refused = duro_error(err)  # 404, 409 or 422, with the fields the error carries
    return error_response(refused.status, refused.message, **refused.extra)


async def _http_error(request: Request, err: Exception) -> Response:
    assert isinstance(err, HTTPException)
    if err.status_code == 404:
        return error_response(
            404, f"there is no {request.url.path}; the API is described at /api/openapi.json"
        )
    if err.status_code == 405:
        return error_response(
            405,
            f"{request.method} is not allowed on {request.url.path}; see /api/openapi.json",
            headers=dict(err.headers or {}),
        )
    return error_response(err.status_code, str(err.detail), headers=dict(err.headers or {}))
