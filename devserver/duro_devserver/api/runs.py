"""``/api/runs``: list (filters, pages), a run with the first page of its steps, more of its steps,
cancel, signal, retry and fork; prune, and retry or cancel the runs a filter matches. A run's steps come a page at a time (``steps_limit`` / ``limit``, at most 1,000): a
run of 300,000 steps costs the server one page per request, never the whole run at once."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from duro import DuroError, Engine, RunNotFoundError, RunStatus
from duro.tooling import RunInfo, StepsPage

from ._common import ApiError, answer, duro_error, engine, query_int, read_body, read_json
from .models import (
    BulkOnlyOut,
    BulkOut,
    CancelRunsBody,
    ForkBody,
    PruneBody,
    PruneOnlyOut,
    PruneOut,
    RetryBody,
    RetryRunsBody,
    RunDetailOut,
    RunOnlyOut,
    RunOut,
    RunPageOut,
    SignalSentOut,
    StepOut,
    StepPageOut,
)

_STATUSES = [s.value for s in RunStatus]


async def _run(eng: Engine, run_id: str) -> RunInfo:
    try:
        return await eng.get_run(run_id)
    except RunNotFoundError as err:
        raise duro_error(err) from None


async def list_runs(request: Request) -> Response:
    params = request.query_params
    statuses = params.getlist("status")
    for status in statuses:
        if status not in _STATUSES:
            raise ApiError(400, f"status {status!r} is not a run status; use one of {', '.join(_STATUSES)}")
    limit = query_int(request, "limit", 50, 1, 500)
    try:
        found = await engine(request).runs_page(
            workflow=params.get("workflow") or None,
            status=statuses or None,
            tag=params.get("tag") or None,
            cursor=params.get("cursor") or None,
            limit=limit,
        )
    except DuroError as err:  # a cursor this server did not give, a filter no run can match (NUL)
        raise ApiError(400, f"query parameter refused: {err}") from None
    page = found.runs
    # the runs waiting in a limit's queue, marked: one query for the page's unfinished runs
    queued = await engine(request).limits.queued_for(r.id for r in page if not r.status.terminal)
    return answer(
        RunPageOut(
            runs=[RunOut.of(r, queued.get(r.id)) for r in page],
            next_cursor=found.next_cursor,
        )
    )


STEPS_PAGE = 200  # a run's steps a page, unless the request asks for another size


async def _steps(request: Request, run_id: str, limit_param: str, cursor: str | None) -> StepsPage:
    limit = query_int(request, limit_param, STEPS_PAGE, 1, StepsPage.MAX_LIMIT)
    try:
        return await engine(request).steps_page(run_id, cursor, limit)
    except RunNotFoundError as err:
        raise duro_error(err) from None
    except DuroError as err:  # a cursor this server did not give
        raise ApiError(400, str(err)) from None


async def get_run(request: Request) -> Response:
    eng = engine(request)
    info = await _run(eng, request.path_params["id"])
    page = await _steps(request, info.id, "steps_limit", None)
    queued = {} if info.status.terminal else await eng.limits.queued_for([info.id])
    return answer(
        RunDetailOut(
            run=RunOut.of(info, queued.get(info.id)),
            steps=[StepOut.of(s) for s in page.steps],
            next_steps_cursor=page.next_cursor,
        )
    )


async def get_steps(request: Request) -> Response:
    page = await _steps(request, request.path_params["id"], "limit", request.query_params.get("cursor"))
    return answer(StepPageOut(steps=[StepOut.of(s) for s in page.steps], next_cursor=page.next_cursor))


async def cancel_run(request: Request) -> Response:
    eng = engine(request)
    info = await _run(eng, request.path_params["id"])
    await eng.cancel(info.id)
    return answer(RunOnlyOut(run=RunOut.of(await eng.get_run(info.id))))


async def send_signal(request: Request) -> Response:
    eng = engine(request)
    info = await _run(eng, request.path_params["id"])
    payload = await read_json(request)
    try:
        await eng.signal(info.id, request.path_params["name"], payload)
    except DuroError as err:  # 409 for a run that has ended, 422 for a name or payload refused
        raise duro_error(err) from None
    return answer(SignalSentOut(sent=True), 202)


async def prune_runs(request: Request) -> Response:
    try:
        body = await read_body(request, PruneBody)
    except ApiError as err:
        if err.status != 422:
            raise
        raise ApiError(
            422,
            f'a prune needs {{"older_than": "30d"}} (a duration string, or a JSON integer of '
            f'milliseconds) and optionally "dry_run": true ({err.message})',
        ) from None
    try:
        report = await engine(request).prune(body.older_than, dry_run=body.dry_run)
    except DuroError as err:
        raise ApiError(422, str(err)) from None
    return answer(PruneOnlyOut(prune=PruneOut.model_validate(vars(report))))


async def retry_run(request: Request) -> Response:
    body = await read_body(request, RetryBody)
    eng = engine(request)
    try:
        handle = await eng.retry(request.path_params["id"], version=body.version)
    except DuroError as err:
        raise duro_error(err) from None
    return answer(RunOnlyOut(run=RunOut.of(await eng.get_run(handle.id))))


async def fork_run(request: Request) -> Response:
    body = await read_body(request, ForkBody)
    eng = engine(request)
    try:
        handle = await eng.fork(
            request.path_params["id"], body.from_seq, new_run_id=body.run_id, version=body.version
        )
    except DuroError as err:
        raise duro_error(err) from None
    return answer(RunOnlyOut(run=RunOut.of(await eng.get_run(handle.id))), 201)


async def _bulk(request: Request, model: type[RetryRunsBody | CancelRunsBody], verb: str) -> Response:
    """``POST /api/runs/retry`` and ``/api/runs/cancel``: the body's fields are the engine call's
    keyword arguments (``engine.retry_runs`` / ``engine.cancel_runs``)."""
    body = await read_body(request, model)
    act = getattr(engine(request), f"{verb}_runs")
    try:
        report = await act(**body.model_dump())
    except DuroError as err:
        raise ApiError(422, str(err)) from None
    return answer(BulkOnlyOut(report=BulkOut.model_validate(vars(report))))


async def retry_runs(request: Request) -> Response:
    return await _bulk(request, RetryRunsBody, "retry")


async def cancel_runs(request: Request) -> Response:
    return await _bulk(request, CancelRunsBody, "cancel")


routes = [
    Route("/api/runs", list_runs, methods=["GET"]),
    Route("/api/runs/prune", prune_runs, methods=["POST"]),
    Route("/api/runs/retry", retry_runs, methods=["POST"]),
    Route("/api/runs/cancel", cancel_runs, methods=["POST"]),
    Route("/api/runs/{id}", get_run, methods=["GET"]),
    Route("/api/runs/{id}/steps", get_steps, methods=["GET"]),
    Route("/api/runs/{id}/cancel", cancel_run, methods=["POST"]),
    Route("/api/runs/{id}/retry", retry_run, methods=["POST"]),
    Route("/api/runs/{id}/fork", fork_run, methods=["POST"]),
    Route("/api/runs/{id}/signals/{name}", send_signal, methods=["POST"]),
]
