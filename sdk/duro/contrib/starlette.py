"""duro inside a Starlette or FastAPI app that starts workflows in-process.

::

    from duro import ConcurrencyLimitError, Engine
    from duro.contrib.starlette import duro_lifespan, on_concurrency_limit

    engine = Engine.from_project(".")
    app = FastAPI(
        lifespan=duro_lifespan(engine),
        exception_handlers={ConcurrencyLimitError: on_concurrency_limit},
    )

:func:`duro_lifespan` runs the engine's worker for the app's lifetime (composed with the app's own
lifespan, if it has one), or with ``worker=False`` opens it as a client only (an API process beside
``duro worker`` processes: it starts runs and reads them, and executes nothing); :func:`on_concurrency_limit` answers a start refused by a quota with the
dev server's 429: the same JSON body (:func:`concurrency_limit_body`) and ``Retry-After`` header
(the error's ``retry_after``: the quota's own, or duro's estimate; docs/quotas.md).

Needs starlette, which the ``dev`` extra brings: ``pip install 'duro[dev]'``.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar, overload

from .. import ConcurrencyLimitError, DuroError
from .._extras import missing  # the one wording of a missing extra
from ..run import _current

try:
    from starlette.requests import Request
    from starlette.responses import Response
except ModuleNotFoundError as err:
    if (err.name or "").partition(".")[0] != "starlette":
        raise  # starlette is there, but something it imports is not: not ours to explain
    raise ImportError(str(missing("dev", "duro.contrib.starlette")), name="starlette") from None

if TYPE_CHECKING:
    from .. import Engine

__all__ = ["concurrency_limit_body", "duro_lifespan", "on_concurrency_limit", "retry_after_header"]

AppT = TypeVar("AppT")
StateT = TypeVar("StateT")


def concurrency_limit_body(err: ConcurrencyLimitError) -> dict[str, Any]:
    """The JSON body of the 429 that answers ``err``, here and in the dev server (one definition):
    the error code, the message that says what to do, the quota's workflow, key, limit and active
    count, and ``retry_after``, the seconds to wait (as the ``Retry-After`` header says)."""
    return {
        "error": "concurrency_limit",
        "message": str(err),
        "workflow": err.workflow,
        "key": err.key,
        "limit": err.limit,
        "active": err.active,
        "retry_after": err.retry_after,
    }


def retry_after_header(err: ConcurrencyLimitError) -> dict[str, str]:
    """The 429's ``Retry-After`` header for ``err``: its ``retry_after`` seconds (see
    :attr:`~duro.ConcurrencyLimitError.retry_after`)."""
    return {"Retry-After": str(max(1, int(err.retry_after)))}


async def on_concurrency_limit(request: Request, exc: Exception) -> Response:
    """An exception handler for :class:`~duro.ConcurrencyLimitError`: 429, with the dev server's
    body (:func:`concurrency_limit_body`) and ``Retry-After`` header. Register it with
    ``exception_handlers={ConcurrencyLimitError: on_concurrency_limit}`` or
    ``app.add_exception_handler(ConcurrencyLimitError, on_concurrency_limit)``."""
    if not isinstance(exc, ConcurrencyLimitError):
        raise exc  # registered for another exception: not ours to answer
    return Response(
        json.dumps(concurrency_limit_body(exc)),
        status_code=429,
        headers=retry_after_header(exc),
        media_type="application/json",
    )


@overload
def duro_lifespan(
    engine: Engine, lifespan: None = None, *, worker: bool = True
) -> Callable[[Any], AbstractAsyncContextManager[None]]: ...


@overload
def duro_lifespan(
    engine: Engine, lifespan: Callable[[AppT], AbstractAsyncContextManager[StateT]], *, worker: bool = True
) -> Callable[[AppT], AbstractAsyncContextManager[StateT]]: ...


def duro_lifespan(
    engine: Engine,
    lifespan: Callable[[Any], AbstractAsyncContextManager[Any]] | None = None,
    *,
    worker: bool = True,
) -> Callable[[Any], AbstractAsyncContextManager[Any]]:
    """A Starlette / FastAPI lifespan that runs ``engine`` (``async with engine:``, its worker
    included) for the app's lifetime and closes it after: ``FastAPI(lifespan=duro_lifespan(engine))``.

    ``worker=False``: the app is a client only, beside ``duro worker`` processes sharing the store.
    The engine is the current one for the app's requests (``Workflow.start()`` finds it), starts and
    reads runs, executes none, and is closed (:meth:`~duro.Engine.aclose`) at shutdown.

    ``lifespan``: the app's own lifespan (a function of the app returning an async context manager,
    as ``@asynccontextmanager`` makes). The engine is up before it starts, so it may start runs, and
    stops after it ends; the state it yields (a dict, for ``request.state``) is passed through.
    """

    @asynccontextmanager
    async def run(app: Any) -> AsyncIterator[Any]:
        async with engine if worker else _client(engine):
            if lifespan is None:
                yield None
            else:
                async with lifespan(app) as state:
                    yield state

    return run


@asynccontextmanager
async def _client(engine: Engine) -> AsyncIterator[Engine]:
    """``engine`` as the current engine, its worker not run; closed on the way out. Requests run in
    tasks of the server's, not of the lifespan's context: they find it in the entered engines."""
    if engine.worker is not None:
        raise DuroError(
            "duro_lifespan(engine, worker=False): this engine already runs its worker; pass an "
            "engine that is not entered, or leave worker=True"
        )
    _current.push_entered(engine)
    token = _current.current_engine.set(engine)
    try:
        yield engine
    finally:
        _current.pop_entered(engine)
        try:
            _current.current_engine.reset(token)
        except ValueError:  # left in another context than entered
            _current.current_engine.set(None)
        await engine.aclose()
