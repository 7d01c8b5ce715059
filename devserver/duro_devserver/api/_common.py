"""What every route group shares: the current engine, JSON answers, and errors that say what to do."""

from __future__ import annotations

import json
import logging
import math
import re
import sqlite3
import sys
from typing import Any, TypeVar

import sqlalchemy as sa
from pydantic import BaseModel, ValidationError
from starlette.requests import Request
from starlette.responses import Response

from duro import (
    ConcurrencyLimitError,
    DuroError,
    Engine,
    InputError,
    RunEndedError,
    RunNotFoundError,
    RunStatusError,
)
from duro.contrib.starlette import concurrency_limit_body, retry_after_header
from duro.store import SqlStore
from duro.tooling import StoreUnavailable

from ..source import EngineSource

M = TypeVar("M", bound=BaseModel)

MAX_BODY_BYTES = 1024 * 1024
# JSON bodies nest at most this deep: deeper would hit Python's recursion limit when parsed, or
# pydantic's when a run holding it is answered
MAX_JSON_DEPTH = 100
RETRY_AFTER_S = 5  # a store error that escaped without saying how long to wait


def store_down_errors() -> tuple[type[BaseException], ...]:
    """What says the store did not answer: the engine's StoreUnavailable, or a driver's error that
    escaped it (answered the same way, never as a 500 with SQL and a traceback). psycopg's once it
    is loaded: a PostgreSQL URL loads it when parsed, before any app or engine uses the store."""
    psycopg = sys.modules.get("psycopg")
    found: tuple[type[BaseException], ...] = (
        StoreUnavailable,
        sa.exc.OperationalError,
        sqlite3.OperationalError,
    )
    return found if psycopg is None else (*found, psycopg.OperationalError)


log = logging.getLogger("duro.devserver")

_CODES = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    409: "conflict",
    413: "payload_too_large",
    422: "unprocessable",
    429: "concurrency_limit",
    503: "unavailable",
}


class ApiError(Exception):
    """An answer other than success: ``status``, a message that says what to do, extra fields."""

    # positional-only: a body field may be called ``status`` too (a run's, in a 409)
    def __init__(
        self, status: int, message: str, /, headers: dict[str, str] | None = None, **extra: Any
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers or {}
        self.extra = extra


def error_response(
    status: int, message: str, /, headers: dict[str, str] | None = None, **extra: Any
) -> Response:
    body = {"error": _CODES.get(status, "error"), "message": message, **extra}
    return Response(json.dumps(body), status_code=status, headers=headers, media_type="application/json")


def store_down(err: BaseException | None) -> BaseException | None:
    """``err``, or the exception it was raised from or while handling, that says the store did not
    answer (a route that turned any DuroError into a 404 or 422 must not hide a 503)."""
    seen: set[int] = set()
    down = store_down_errors()
    while err is not None and id(err) not in seen:
        if isinstance(err, down):
            return err
        seen.add(id(err))
        err = err.__cause__ or err.__context__
    return None


def unavailable_response(err: BaseException) -> Response:
    """503 with ``Retry-After`` for a store that did not answer. The message says what to do and
    carries nothing of the store's error (no SQL, no parameters); the log gets one line with its type."""
    retry = err.retry_after_s if isinstance(err, StoreUnavailable) else RETRY_AFTER_S
    retry = max(1, int(retry))
    cause = err.__cause__ if isinstance(err, StoreUnavailable) and err.__cause__ is not None else err
    driver_error = getattr(cause, "orig", None) or cause
    if isinstance(err, StoreUnavailable) and err.__cause__ is None:
        what = str(err)  # duro's own reason (a SQLite file deleted or replaced): it names the file
    elif isinstance(driver_error, sqlite3.Error) and SqlStore.is_unavailable(driver_error):
        what = "the database is busy: another process holds the SQLite file's write lock"
    else:
        what = "the database is busy or out of reach"
    log.warning("duro: answered 503, %s (%s)", what, type(cause).__name__)
    return error_response(
        503,
        f"{what}; the request did not complete: retry in {retry} s",
        {"Retry-After": str(retry)},
        retry_after=retry,
    )


def answer(model: BaseModel, status: int = 200) -> Response:
    return Response(model.model_dump_json(), status_code=status, media_type="application/json")


def source(request: Request) -> EngineSource:
    held: EngineSource = request.app.state.source  # starlette's State holds anything: set in create_app
    return held


def engine(request: Request) -> Engine:
    return source(request).engine


async def read_json(request: Request) -> Any:
    """The request's JSON body (``None`` when empty). 413 above the size limit, counted as the bytes
    arrive (a body sent without a length is never read whole first); 400 if not JSON or nested
    deeper than ``MAX_JSON_DEPTH``."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise ApiError(
                413,
                f"the request body is over {MAX_BODY_BYTES} bytes, the limit; send less "
                f"(large data belongs in your own storage, with its key in the input)",
            )
        chunks.append(chunk)
    raw = b"".join(chunks)
    if not raw.strip():
        return None
    too_deep = ApiError(
        400,
        f"the request body nests JSON arrays and objects more than {MAX_JSON_DEPTH} deep, "
        f"the maximum; flatten it",
    )
    try:
        data = json.loads(raw, parse_constant=_not_a_number, parse_float=_finite)
    except RecursionError:
        raise too_deep from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ApiError(
            400,
            f'the request body is not JSON ({err}); send e.g. {{"input": {{"id": 1}}}} '
            f"with Content-Type: application/json",
        ) from None
    if json_depth(data, MAX_JSON_DEPTH) > MAX_JSON_DEPTH:
        raise too_deep
    if _SURROGATE_ESCAPE.search(raw) and _lone_surrogate(data):
        raise ApiError(
            400,
            "the request body holds a lone UTF-16 surrogate (an escape such as \\ud800 without its "
            "pair), which is not text; send valid Unicode",
        )
    return data


# a \uD800-\uDFFF escape: half of a pair (an emoji, say), or a lone one, which is no character at all
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF][0-9a-fA-F]{2}")


def _lone_surrogate(data: Any) -> bool:
    """Whether a string of ``data`` (keys included) holds a surrogate that json.loads could not pair."""
    try:
        json.dumps(data, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def _not_a_number(name: str) -> Any:
    """``NaN`` and ``Infinity`` are not JSON (Python reads them): refused, not stored as null."""
    raise ApiError(400, f"the request body holds {name}, which is not a JSON number; send a finite number")


def _finite(text: str) -> float:
    """A JSON number too large for a float (``1e999``) is refused, not turned into null."""
    value = float(text)
    if not math.isfinite(value):
        raise ApiError(
            400,
            f"the request body holds the number {text[:40]}, too large to keep; send a "
            f"smaller one, or a string",
        )
    return value


def json_depth(data: Any, stop: int) -> int:
    """How deeply ``data`` nests lists and dicts (a scalar is 0, ``[]`` is 1), counted without
    recursion; stops counting once past ``stop``."""
    deepest = 0
    pending: list[tuple[Any, int]] = [(data, 0)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, dict):
            value = value.values()
        elif not isinstance(value, list):
            continue
        depth += 1
        if depth > deepest:
            deepest = depth
            if deepest > stop:
                break
        pending.extend((item, depth) for item in value if isinstance(item, (dict, list)))
    return deepest


async def read_body(request: Request, model: type[M]) -> M:
    """The body validated against ``model``; 422 naming the field and what is wrong."""
    data = await read_json(request)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ApiError(422, f"the request body must be a JSON object, got {type(data).__name__}")
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ApiError(422, describe_validation(err), errors=validation_errors(err)) from None


def describe_validation(err: ValidationError) -> str:
    parts = []
    for problem in err.errors()[:5]:
        where = ".".join(str(p) for p in problem["loc"]) or "body"
        parts.append(f"{where}: {problem['msg']}")
    return "; ".join(parts)


def validation_errors(err: ValidationError) -> list[dict[str, Any]]:
    """pydantic's list of what is wrong, as JSON values (inputs that are not JSON as text)."""
    errors: list[dict[str, Any]] = json.loads(err.json(include_url=False))
    return errors


def duro_error(err: DuroError, status: int = 422) -> ApiError:
    """The answer to an error the engine raised: 404 for a run that does not exist (with its
    ``run_id``), 409 for a signal to a run that has ended or an action on a run in the wrong status
    (``run_id``, ``status``), 422 for an input that does not match its workflow (``workflow`` and
    pydantic's ``errors``), 429 for a quota's refusal (the body and ``Retry-After`` that
    ``duro.contrib.starlette`` answers with too); ``status`` otherwise."""
    if isinstance(err, ConcurrencyLimitError):
        refusal = concurrency_limit_body(err)  # error_response puts back its first two fields
        fields = {name: value for name, value in refusal.items() if name not in ("error", "message")}
        return ApiError(429, refusal["message"], headers=retry_after_header(err), **fields)
    if isinstance(err, RunStatusError):
        return ApiError(409, str(err), run_id=err.run_id, status=err.status)
    if isinstance(err, RunNotFoundError):
        where = f" in namespace {err.namespace!r}" if err.namespace is not None else ""
        why = f": {err.reason}" if err.reason else ""
        message = (
            f"run {err.run_id!r} does not exist{where}{why}; check the id, or list runs with GET /api/runs"
        )
        return ApiError(404, message, run_id=err.run_id)
    if isinstance(err, RunEndedError):
        return ApiError(409, str(err), run_id=err.run_id, status=err.status)
    if isinstance(err, InputError):
        return ApiError(422, str(err), workflow=err.workflow, errors=err.errors)
    return ApiError(status, str(err))


def query_int(request: Request, name: str, default: int, low: int, high: int) -> int:
    text = request.query_params.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        raise ApiError(
            400, f"query parameter {name}={text!r} is not an integer; use {low} to {high}"
        ) from None
    if not low <= value <= high:
        raise ApiError(400, f"query parameter {name}={value} is out of range; use {low} to {high}")
    return value
