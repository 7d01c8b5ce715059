"""``/api/health``, ``/api/status`` and ``/api/openapi.json``."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ._common import answer, source
from .models import HealthOut, StatusOut
from .openapi import openapi_document


def duro_version() -> str:
    try:
        return version("duro")
    except PackageNotFoundError:
        return "0+unknown"


async def health(_request: Request) -> Response:
    return answer(HealthOut(ok=True, version=duro_version()))


async def status(request: Request) -> Response:
    return answer(StatusOut(**source(request).status(), token_required=request.app.state.token_required))


async def openapi(_request: Request) -> Response:
    return JSONResponse(openapi_document())


routes = [
    Route("/api/health", health, methods=["GET"]),
    Route("/api/status", status, methods=["GET"]),
    Route("/api/openapi.json", openapi, methods=["GET"]),
]
