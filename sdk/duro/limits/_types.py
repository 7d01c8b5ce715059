"""The limits' records: what a run holds (:class:`Slot`), what a release did (:class:`SlotRelease`),
and the operator's views of a limit (:class:`LimitInfo`) and of its slots (:class:`SlotInfo`)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, ClassVar, Protocol

from .._errors import DuroError
from .._text import check_key_text, refuse_nul
from ..definitions._config import LimitConfig, Workspace

HOOK_PREFIX = "Esperando hueco · "
MAX_LABEL = 200


@dataclass(frozen=True)
class Slot:
    """A slot of a limit, held by a run: ``id``, ``limit`` name, the ``label`` given at acquire, and
    ``key``: a keyed limit's key (``None`` on a plain limit)."""

    id: str
    limit: str
    label: str | None = None
    key: str | None = None


@dataclass(frozen=True)
class SlotRelease:
    """The outcome of ``release_slot``: ``released`` is False when the slot was already free
    (released before, taken back by ``max_hold``) or unknown."""

    released: bool


@dataclass(frozen=True)
class LimitInfo:
    """A limit for operators: declared and effective capacity and max hold, overrides, live counts."""

    name: str
    capacity: int
    effective_capacity: int
    max_hold: str
    effective_max_hold: str
    capacity_override: int | None
    max_hold_override: str | None
    busy: int
    reserved: int
    waiting: int
    per_key: int | None = None  # a keyed limit's capacity per key


@dataclass(frozen=True)
class LimitKey:
    """One key of a keyed limit: its ``capacity`` in effect (``per_key``, or an operator's override,
    ``overridden``) and its counts."""

    key: str
    capacity: int
    overridden: bool
    busy: int
    reserved: int
    waiting: int


@dataclass(frozen=True)
class SlotInfo:
    """A slot of a limit: ``state`` waiting (with its queue ``position``; in its key's queue when the
    slots are listed for one key), reserved or busy; ``key`` on a keyed limit."""

    id: str
    limit: str
    state: str
    run_id: str | None
    label: str | None
    position: int | None
    enqueued_at: datetime
    waited: timedelta | None
    held_since: datetime | None
    expires_at: datetime | None
    reserved_until: datetime | None
    timeout_at: datetime | None
    key: str | None = None  # a keyed limit's key


@dataclass(frozen=True)
class SlotsPage:
    """A page of a limit's slots (``engine.limits.slots_page``), busy and reserved first, then the
    queue in order, and ``next_cursor`` for the next page (``None``: no slot after these, now)."""

    slots: list[SlotInfo]
    next_cursor: str | None
    MAX_LIMIT: ClassVar[int] = 1000  # slots a page at the most


def check_label(limit: str, label: Any) -> str | None:
    if label is None:
        return None
    if not isinstance(label, str) or len(label) > MAX_LABEL:
        raise DuroError(
            f"limit {limit!r}: label must be a string of at most {MAX_LABEL} characters, "
            f"got {type(label).__name__}" + (f" of {len(label)}" if isinstance(label, str) else "")
        )
    return refuse_nul(label, f"limit {limit!r}: the slot label")  # the label itself stays out of the message


class _Named(Protocol):
    """A limit as declared (``LimitConfig``) or as listed (``LimitInfo``)."""

    @property
    def name(self) -> str: ...

    @property
    def per_key(self) -> int | None: ...


def check_key(config: _Named, key: Any) -> str | None:
    """``key`` for a slot of ``config``: required on a keyed limit (a non-empty string of at most 200
    characters, no NUL), refused on a plain one. The key itself stays out of the messages."""
    name = config.name
    if config.per_key is None:
        if key is not None:
            raise DuroError(
                f"limit {name!r} has no keys: leave key= out, or declare it keyed with "
                f"Limit(capacity=..., max_hold=..., per_key=N) in duro.config.py"
            )
        return None
    if key is None:
        raise DuroError(
            f"limit {name!r} is keyed (at most {config.per_key} slots per key): pass key=, "
            f'e.g. acquire_slot({name!r}, key=f"account:{{account_id}}")'
        )
    return check_key_text(key, f"limit {name!r}", "the slot key")


def limit_config(workspace: Workspace, name: str) -> LimitConfig:
    """The declared limit ``name``, or a clear error listing the limits that exist."""
    config = workspace.limits.get(name) if isinstance(name, str) else None
    if config is None:
        known = ", ".join(sorted(workspace.limits)) or "none"
        raise DuroError(
            f"unknown limit {name!r} (declared in duro.config.py: {known}); declare it with "
            f"define_workspace(limits={{{name!r}: Limit(capacity=..., max_hold=...)}})"
        )
    return config
