"""Event triggers: ``@workflow(on_event="order.created")`` and ``await engine.emit(name, payload)``.

Each subscriber starts through the same path as any start, so its quota applies: a subscriber that
is refused (or whose input does not fit the payload) is skipped and the others start.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .._errors import DuroError
from .._text import NO_NUL, NUL
from ..client._handle import RunHandle
from ..client._starts import Starter
from ..definitions._definitions import Registry

EVENT_NAME = re.compile(r"^[A-Za-z0-9._:/-]{1,200}\Z")


@dataclass(frozen=True)
class SkippedStart:
    """A subscriber that did not start, and why (a ``ConcurrencyLimitError``, a bad input...)."""

    workflow: str
    error: DuroError


@dataclass(frozen=True)
class EmitResult:
    """What ``engine.emit`` did: the runs it started and the subscribers it skipped."""

    event: str
    started: list[RunHandle] = field(default_factory=list)
    skipped: list[SkippedStart] = field(default_factory=list)


def check_event_name(name: Any) -> str:
    if not isinstance(name, str) or not EVENT_NAME.match(name):
        raise DuroError(
            f"event name {name!r} is invalid: use 1 to 200 letters, digits, '.', '_', ':', '/' or '-'"
        )
    return name


async def emit(
    registry: Registry,
    starter: Starter,
    handle: Callable[[str], RunHandle],
    name: str,
    payload: Any,
    event_id: str | None,
) -> EmitResult:
    """Start every workflow subscribed to event ``name`` (see ``Engine.emit``)."""
    check_event_name(name)
    if event_id is not None and (
        not isinstance(event_id, str) or not 0 < len(event_id) <= 120 or NUL in event_id
    ):
        raise DuroError(f"event_id {event_id!r} is invalid: use a string of 1 to 120 characters; {NO_NUL}")
    result = EmitResult(event=name)
    subscribers = sorted(
        (spec for spec in registry.specs.values() if spec.on_event == name), key=lambda spec: spec.name
    )
    for spec in subscribers:
        run_id = None if event_id is None else f"event:{event_id}:{spec.name}"
        try:
            record, _ = await starter.start(spec, payload, run_id=run_id)
            result.started.append(handle(record.id))
        except DuroError as err:
            result.skipped.append(SkippedStart(spec.name, err))
    return result
