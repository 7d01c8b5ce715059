"""``/api/rates``: the Rates screen's data and the operator's verbs (limit, pause, resume)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from duro import DuroError, Engine
from duro.tooling import RateInfo

from ._common import ApiError, answer, engine, read_body
from .models import (
    PauseBody,
    RateLimitBody,
    RateOnlyOut,
    RateOut,
    RatesOut,
    RateWaiterOut,
    RateWaitersOut,
    ResumeBody,
)


async def _rate(eng: Engine, name: str) -> RateInfo:
    infos = await eng.rates.list()  # the project's, and those the store knows (a client engine)
    for info in infos:
        if info.name == name:
            return info
    known = ", ".join(info.name for info in infos) or "none (declare them in duro.config.py)"
    raise ApiError(404, f"rate {name!r} does not exist; known rates: {known}")


def _changed(request: Request) -> None:
    request.app.state.monitor.poke()


async def list_rates(request: Request) -> Response:
    return answer(RatesOut(rates=[RateOut.of(i) for i in await engine(request).rates.list()]))


async def get_rate(request: Request) -> Response:
    return answer(RateOnlyOut(rate=RateOut.of(await _rate(engine(request), request.path_params["name"]))))


async def rate_waiters(request: Request) -> Response:
    """The rate's waiters, by key then in queue order; ``?key=K``: one key's queue."""
    eng = engine(request)
    info = await _rate(eng, request.path_params["name"])
    key = request.query_params.get("key")
    try:
        waiters = await eng.rates.waiters(info.name, key=key)
    except DuroError as err:
        raise ApiError(400, f"?key=: {err}") from None
    return answer(
        RateWaitersOut(
            rate=RateOut.of(info), waiters=[RateWaiterOut.model_validate(vars(w)) for w in waiters]
        )
    )


async def set_limit(request: Request) -> Response:
    eng = engine(request)
    info = await _rate(eng, request.path_params["name"])
    try:
        body = await read_body(request, RateLimitBody)
    except ApiError as err:
        if err.status != 422:
            raise
        raise ApiError(
            422,
            f"rate {info.name!r}: limit must be a JSON integer from 1 to 1000000 (not a string or a "
            f"boolean), or null to reset to duro.config.py ({err.message})",
        ) from None
    try:
        updated = await eng.rates.set_limit(info.name, body.limit)
    except DuroError as err:
        raise ApiError(422, str(err)) from None
    _changed(request)
    return answer(RateOnlyOut(rate=RateOut.of(updated)))


async def pause(request: Request) -> Response:
    eng = engine(request)
    info = await _rate(eng, request.path_params["name"])
    try:
        body = await read_body(request, PauseBody)
    except ApiError as err:
        if err.status != 422:
            raise
        raise ApiError(
            422,
            f'rate {info.name!r}: a pause needs {{"duration": "5m"}} (a duration string such as "30s" or '
            f'"5m", or a JSON integer of milliseconds) and optionally "key" ({err.message})',
        ) from None
    try:
        updated = await eng.rates.pause(info.name, body.duration, key=body.key)
    except DuroError as err:
        raise ApiError(422, str(err)) from None
    _changed(request)
    return answer(RateOnlyOut(rate=RateOut.of(updated)))


async def resume(request: Request) -> Response:
    eng = engine(request)
    info = await _rate(eng, request.path_params["name"])
    body = await read_body(request, ResumeBody)
    try:
        updated = await eng.rates.resume(info.name, key=body.key)
    except DuroError as err:
        raise ApiError(422, str(err)) from None
    _changed(request)
    return answer(RateOnlyOut(rate=RateOut.of(updated)))


routes = [
    Route("/api/rates", list_rates, methods=["GET"]),
    Route("/api/rates/{name}", get_rate, methods=["GET"]),
    Route("/api/rates/{name}/waiters", rate_waiters, methods=["GET"]),
    Route("/api/rates/{name}/limit", set_limit, methods=["PUT"]),
    Route("/api/rates/{name}/pause", pause, methods=["POST"]),
    Route("/api/rates/{name}/resume", resume, methods=["POST"]),
]
