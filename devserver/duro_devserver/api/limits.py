"""``/api/limits`` and ``/api/slots``: the Limits screen's data and the operator's verbs."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from duro import DuroError, Engine
from duro.tooling import LimitInfo, SlotsPage, check_key, ms_to_datetime

from ._common import ApiError, answer, engine, query_int, read_body
from .models import (
    CapacityBody,
    HistoryOut,
    HistoryPoint,
    LastHourOut,
    LimitKeyOnlyOut,
    LimitKeyOut,
    LimitKeysOut,
    LimitOnlyOut,
    LimitOut,
    LimitsOut,
    MaxHoldBody,
    ReleasedOut,
    SlotOut,
    SlotsOut,
)

_PYTHON_DURATIONS = "an int of milliseconds or a timedelta"
_JSON_DURATIONS = "a JSON integer of milliseconds, or null to reset to duro.config.py"


async def _limit(eng: Engine, name: str) -> LimitInfo:
    infos = await eng.limits.list()  # the project's, and those the store knows (a client engine)
    for info in infos:
        if info.name == name:
            return info
    known = ", ".join(info.name for info in infos) or "none (declare them in duro.config.py)"
    raise ApiError(404, f"limit {name!r} does not exist; known limits: {known}")


def _changed(request: Request) -> None:
    request.app.state.monitor.poke()


async def list_limits(request: Request) -> Response:
    return answer(LimitsOut(limits=[LimitOut.of(i) for i in await engine(request).limits.list()]))


async def get_limit(request: Request) -> Response:
    return answer(LimitOnlyOut(limit=LimitOut.of(await _limit(engine(request), request.path_params["name"]))))


def _key_param(request: Request, info: LimitInfo) -> str | None:
    """``?key=K``: one key's slots of a keyed limit (at most 200 characters, no NUL)."""
    key = request.query_params.get("key")
    if key is None:
        return None
    if info.per_key is None:
        raise ApiError(400, f"limit {info.name!r} has no keys: leave out ?key=")
    try:
        return check_key(info, key)
    except DuroError as err:
        raise ApiError(400, f"?key=: {err}") from None


async def limit_slots(request: Request) -> Response:
    eng = engine(request)
    info = await _limit(eng, request.path_params["name"])
    limit = query_int(request, "limit", SLOTS_PAGE, 1, SlotsPage.MAX_LIMIT)
    try:
        page = await eng.limits.slots_page(
            info.name, key=_key_param(request, info), cursor=request.query_params.get("cursor"), limit=limit
        )
    except DuroError as err:  # a cursor this server did not give
        raise ApiError(400, f"query parameter refused: {err}") from None
    return answer(
        SlotsOut(
            limit=LimitOut.of(info), slots=[SlotOut.of(s) for s in page.slots], next_cursor=page.next_cursor
        )
    )


SLOTS_PAGE = 1000  # a limit's slots a page, unless the request asks for another size


async def limit_history(request: Request) -> Response:
    """The chart's points (``minutes`` of them) and, from the store, the limit's last hour: grants
    and their waits' percentiles, expiries (lost releases) and timeouts (one query)."""
    eng = engine(request)
    info = await _limit(eng, request.path_params["name"])
    minutes = query_int(request, "minutes", 60, 1, 24 * 60)
    since = eng.clock.now_ms() - minutes * 60_000
    points = request.app.state.monitor.history(info.name, since)
    last_hour = await eng.limits.stats(info.name, "1h")
    return answer(
        HistoryOut(
            points=[
                HistoryPoint(at=ms_to_datetime(at), busy=busy, waiting=waiting)
                for at, busy, waiting in points
            ],
            last_hour=LastHourOut.of(last_hour),
        )
    )


async def release_slot(request: Request) -> Response:
    slot_id = request.path_params["id"]
    try:
        outcome = await engine(request).limits.release(slot_id)
    except DuroError:
        raise ApiError(
            404,
            f"slot {slot_id!r} does not exist; list a limit's slots with GET "
            f"/api/limits/{{name}}/slots (the CLI: duro limits slots LIMIT)",
        ) from None
    _changed(request)
    return answer(ReleasedOut(released=outcome.released, slot_id=slot_id))


async def set_capacity(request: Request) -> Response:
    eng = engine(request)
    info = await _limit(eng, request.path_params["name"])
    try:
        body = await read_body(request, CapacityBody)
    except ApiError as err:
        if err.status != 422:
            raise
        raise ApiError(
            422,
            f"limit {info.name!r}: capacity must be a JSON integer from 1 to 100000 (not a "
            f"string or a boolean), or null to reset to duro.config.py ({err.message})",
        ) from None
    try:
        updated = await eng.limits.set_capacity(info.name, body.capacity)
    except DuroError as err:
        raise ApiError(422, str(err)) from None
    _changed(request)
    return answer(LimitOnlyOut(limit=LimitOut.of(updated)))


async def set_max_hold(request: Request) -> Response:
    eng = engine(request)
    info = await _limit(eng, request.path_params["name"])
    try:
        body = await read_body(request, MaxHoldBody)
    except ApiError as err:
        if err.status != 422:
            raise
        raise ApiError(
            422,
            f'limit {info.name!r}: max_hold must be a duration string such as "45m" or "2h" '
            f"(units ms, s, m, h, d in lowercase, no spaces; at most 30d), a JSON integer of "
            f"milliseconds, or null to reset to duro.config.py ({err.message})",
        ) from None
    try:
        updated = await eng.limits.set_max_hold(info.name, body.max_hold)
    except DuroError as err:  # the SDK's hint names Python values; over HTTP the body's are meant
        message = str(err).replace(_PYTHON_DURATIONS, _JSON_DURATIONS)
        raise ApiError(422, message) from None
    _changed(request)
    return answer(LimitOnlyOut(limit=LimitOut.of(updated)))


async def limit_keys(request: Request) -> Response:
    """A keyed limit's keys, busiest first; ``?search=TEXT`` keeps those containing it."""
    eng = engine(request)
    info = await _limit(eng, request.path_params["name"])
    if info.per_key is None:
        raise ApiError(400, f"limit {info.name!r} has no keys (it is not declared with per_key)")
    most = query_int(request, "limit", 50, 1, 10_000)
    search = request.query_params.get("search")
    if search is not None and (len(search) > 200 or "\x00" in search):
        raise ApiError(400, "?search= must be at most 200 characters, without NUL")
    keys = await eng.limits.keys(info.name, limit=most, search=search or None)
    return answer(
        LimitKeysOut(limit=LimitOut.of(info), keys=[LimitKeyOut.model_validate(vars(k)) for k in keys])
    )


async def set_key_capacity(request: Request) -> Response:
    eng = engine(request)
    info = await _limit(eng, request.path_params["name"])
    key = request.path_params["key"]
    try:
        body = await read_body(request, CapacityBody)
    except ApiError as err:
        if err.status != 422:
            raise
        raise ApiError(
            422,
            f"limit {info.name!r}: a key's capacity must be a JSON integer from 1 to 100000 (not a "
            f"string or a boolean), or null to reset to the limit's per_key ({err.message})",
        ) from None
    try:
        updated = await eng.limits.set_key_capacity(info.name, key, body.capacity)
    except DuroError as err:
        raise ApiError(422, str(err)) from None
    _changed(request)
    return answer(LimitKeyOnlyOut(limit=info.name, key=LimitKeyOut.model_validate(vars(updated))))


routes = [
    Route("/api/limits", list_limits, methods=["GET"]),
    Route("/api/limits/{name}", get_limit, methods=["GET"]),
    Route("/api/limits/{name}/slots", limit_slots, methods=["GET"]),
    Route("/api/limits/{name}/history", limit_history, methods=["GET"]),
    Route("/api/limits/{name}/capacity", set_capacity, methods=["PUT"]),
    Route("/api/limits/{name}/keys", limit_keys, methods=["GET"]),
    Route("/api/limits/{name}/keys/{key}/capacity", set_key_capacity, methods=["PUT"]),
    Route("/api/limits/{name}/max-hold", set_max_hold, methods=["PUT"]),
    Route("/api/slots/{id}/release", release_slot, methods=["POST"]),
]
