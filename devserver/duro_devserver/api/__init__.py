"""The HTTP API, one module per route group (see docs/api.md)."""

from __future__ import annotations

from starlette.routing import BaseRoute

from . import events, limits, meta, rates, runs, schedules, workflows


def api_routes() -> list[BaseRoute]:
    return [
        *meta.routes,
        *workflows.routes,
        *runs.routes,
        *limits.routes,
        *rates.routes,
        *schedules.routes,
        *events.routes,
    ]
