"""The rates' records: what a run was granted (:class:`RateGrant`) and the operator's views of a
rate (:class:`RateInfo`) and of its waiters (:class:`RateWaiter`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from .._errors import DuroError
from .._text import check_key_text
from ..definitions._config import RateConfig, Workspace

HOOK_PREFIX = "rate · "


@dataclass(frozen=True)
class RateGrant:
    """A grant of a rate to a run: the ``rate``'s name, its ``key`` (``None`` on an unkeyed rate),
    when it was granted (an aware UTC datetime) and how long the run waited for it."""

    rate: str
    key: str | None
    granted_at: datetime
    waited_ms: int


@dataclass(frozen=True)
class RateInfo:
    """A rate for operators: declared and effective limit, its window, the costs granted in the
    current window and the waiters (of every key, on a keyed rate), and a pause of the whole rate."""

    name: str
    limit: int
    effective_limit: int
    per: str
    limit_override: int | None
    per_key: bool
    granted: int
    waiting: int
    paused_until: datetime | None


@dataclass(frozen=True)
class RateWaiter:
    """One ``acquire_rate`` waiting: its run, its place in its key's queue (1: next), its cost, when
    it began to wait and when it times out."""

    run_id: str | None
    key: str | None
    position: int
    cost: int
    enqueued_at: datetime
    timeout_at: datetime | None


def aware(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def grant_of(result: str | None) -> RateGrant:
    """A grant as its hook step recorded it (see ``store.grant_json``)."""
    data = json.loads(result or "{}")
    return RateGrant(data["rate"], data.get("key"), aware(int(data["granted_at"])), int(data["waited_ms"]))


def rate_config(workspace: Workspace, name: Any) -> RateConfig:
    """The declared rate ``name``, or a clear error listing the rates that exist."""
    config = workspace.rates.get(name) if isinstance(name, str) else None
    if config is None:
        known = ", ".join(sorted(workspace.rates)) or "none"
        raise DuroError(
            f"unknown rate {name!r} (declared in duro.config.py: {known}); declare it with "
            f'define_workspace(rates={{{name!r}: Rate(limit=..., per="1m")}})'
        )
    return config


def check_rate_key(config: RateConfig, key: Any) -> str | None:
    """``key`` for a grant of ``config``: required on a keyed rate (a non-empty string of at most 200
    characters, no NUL), refused on an unkeyed one. The key itself stays out of the messages."""
    name = config.name
    if not config.per_key:
        if key is not None:
            raise DuroError(
                f"rate {name!r} has no keys: leave key= out, or declare it keyed with "
                f"Rate(limit=..., per=..., per_key=True) in duro.config.py"
            )
        return None
    if key is None:
        raise DuroError(
            f'rate {name!r} is keyed (a window per key): pass key=, e.g. acquire_rate({name!r}, key=f"tenant:{{tenant_id}}")'
        )
    return check_key_text(key, f"rate {name!r}", "the key")


def check_cost(config: RateConfig, cost: Any) -> int:
    if isinstance(cost, bool) or not isinstance(cost, int) or not 1 <= cost <= config.limit:
        raise DuroError(
            f"rate {config.name!r}: cost must be an integer from 1 to the rate's limit ({config.limit}), got {cost!r}"
        )
    return cost
