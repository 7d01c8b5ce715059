"""``/api/schedules``: persisted cron schedules (create, list, delete)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from duro import Concurrency, DuroError

from ._common import ApiError, answer, duro_error, engine, read_body
from .models import DeletedOut, ScheduleBody, ScheduleOnlyOut, ScheduleOut, SchedulesOut


async def list_schedules(request: Request) -> Response:
    return answer(SchedulesOut(schedules=[ScheduleOut.of(s) for s in await engine(request).schedules.list()]))


async def create_schedule(request: Request) -> Response:
    eng = engine(request)
    body = await read_body(request, ScheduleBody)
    if body.workflow not in eng.workflows:
        raise ApiError(
            404,
            f"workflow {body.workflow!r} does not exist; known workflows: "
            f"{', '.join(sorted(eng.workflows)) or 'none'}",
        )
    quota = (
        None
        if body.concurrency is None
        else Concurrency(key=body.concurrency.key, limit=body.concurrency.limit)
    )
    try:
        info = await eng.schedules.create(body.name, body.workflow, body.cron, body.input, quota)
    except DuroError as err:  # an InputError carries the workflow and pydantic's errors
        raise duro_error(err) from None
    return answer(ScheduleOnlyOut(schedule=ScheduleOut.of(info)), 201)


async def delete_schedule(request: Request) -> Response:
    try:
        await engine(request).schedules.delete(request.path_params["name"])
    except DuroError as err:
        raise ApiError(404, str(err)) from None
    return answer(DeletedOut(deleted=True))


routes = [
    Route("/api/schedules", list_schedules, methods=["GET"]),
    Route("/api/schedules", create_schedule, methods=["POST"]),
    Route("/api/schedules/{name}", delete_schedule, methods=["DELETE"]),
]
