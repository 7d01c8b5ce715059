"""Limits: named slots with a durable FIFO queue.

This release declares and validates limits (``duro.config.py``); the slot runtime — the queue,
reservations, ``max_hold`` expiry and operator overrides — is the next piece of work. Until it
lands, the slot helpers check their arguments and then say so clearly instead of pretending.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, TypeVar

from . import _current
from ._durations import Duration
from ._errors import DuroError

T = TypeVar("T")


@dataclass(frozen=True)
class Slot:
    """A slot of a limit held by a run: ``id``, ``limit`` name and the ``label`` given at acquire."""

    id: str
    limit: str
    label: str | None = None


@dataclass(frozen=True)
class SlotRelease:
    """The outcome of ``release_slot``: ``released`` is False when the slot was already free."""

    released: bool


def _unavailable(helper: str, limit: str) -> DuroError:
    return DuroError(f"{helper}({limit!r}): the slot runtime of limits is not available in this duro "
                     f"release yet; declare limits in duro.config.py now, acquire slots once it lands")


def _check(helper: str, limit: Any) -> None:
    run = _current.run_or_raise(helper)
    if not isinstance(limit, str) or limit not in run.engine.workspace.limits:
        known = ", ".join(sorted(run.engine.workspace.limits)) or "none"
        raise DuroError(f"{helper}: unknown limit {limit!r} (declared in duro.config.py: {known})")


async def acquire_slot(limit: str, label: str | None = None, timeout: Duration = "24h") -> Slot:
    """Take a slot of ``limit``, waiting in its FIFO queue up to ``timeout``."""
    _check("acquire_slot", limit)
    raise _unavailable("acquire_slot", limit)


async def release_slot(slot_id: str) -> SlotRelease:
    """Give a slot back (from any workflow); idempotent."""
    _current.run_or_raise("release_slot")
    raise _unavailable("release_slot", slot_id)


async def with_limit(limit: str, fn: Callable[[], Awaitable[T]], label: str | None = None,
                     timeout: Duration = "24h") -> T:
    """Take a slot of ``limit``, await ``fn()``, and release the slot on return or raise."""
    _check("with_limit", limit)
    raise _unavailable("with_limit", limit)


@asynccontextmanager
async def limit_slot(limit: str, label: str | None = None, timeout: Duration = "24h") -> AsyncIterator[Slot]:
    """``async with limit_slot("partner-api") as slot:`` — a slot for the body of the block."""
    _check("limit_slot", limit)
    raise _unavailable("limit_slot", limit)
    yield  # pragma: no cover
