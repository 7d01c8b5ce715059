"""``duro.config.py``: ``define_workspace(limits=..., rates=..., workflows=...)`` and its validation."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .._durations import Duration, to_ms
from .._errors import ConfigError, DuroError
from ._definitions import Limit, Rate

LIMIT_NAME = re.compile(r"^[a-z0-9._-]{1,64}\Z")
MAX_CAPACITY = 100_000
MAX_HOLD_MS = 30 * 86_400_000


@dataclass(frozen=True)
class LimitConfig:
    """A validated limit: its name, capacity and max hold in milliseconds; ``per_key``: a keyed
    limit's capacity per key (``None``: a plain limit)."""

    name: str
    capacity: int
    max_hold_ms: int
    per_key: int | None = None


@dataclass(frozen=True)
class RateConfig:
    """A validated rate: at most ``limit`` (in costs) granted in any window of ``per_ms``; with
    ``per_key``, a window per key."""

    name: str
    limit: int
    per_ms: int
    per_key: bool = False


@dataclass(frozen=True)
class WorkflowEntry:
    """One entry of the ``workflows`` list: a path relative to the project root, and serial mode."""

    path: str
    serial: bool = False


@dataclass(frozen=True)
class Workspace:
    """The project's declared limits and rates and, when given, the list of workflow files replacing
    the scan."""

    limits: Mapping[str, LimitConfig] = field(default_factory=dict)
    workflows: tuple[WorkflowEntry, ...] | None = None
    rates: Mapping[str, RateConfig] = field(default_factory=dict)
    retention_ms: int | None = None  # finished runs older than this are deleted (None: kept for ever)


MIN_RETENTION_MS = 60_000


def check_retention(retention: Any) -> int | None:
    """``define_workspace(retention=...)``: a duration of at least a minute, or ``None``."""
    if retention is None:
        return None
    try:
        ms = to_ms(retention, "retention")
    except DuroError as err:
        raise ConfigError(f"{err}; or None to keep every run") from None
    if ms < MIN_RETENTION_MS:
        raise ConfigError(
            f"retention {retention!r} is shorter than a minute: a run would go while its caller may "
            f"still read its result; give a duration such as '30d', or None to keep every run"
        )
    return ms


def check_limit_name(name: Any) -> str:
    if not isinstance(name, str) or not LIMIT_NAME.match(name):
        raise ConfigError(
            f"limit name {name!r} is invalid: use 1 to 64 lowercase letters, digits, '.', '_' or '-'"
        )
    return name


def check_capacity(name: str, capacity: Any) -> int:
    if isinstance(capacity, bool) or not isinstance(capacity, int) or not 1 <= capacity <= MAX_CAPACITY:
        raise ConfigError(
            f"limit {name!r}: capacity must be an integer from 1 to {MAX_CAPACITY}, got {capacity!r}"
        )
    return capacity


def check_max_hold(name: str, max_hold: Any) -> int:
    if max_hold is None:
        raise ConfigError(
            f"limit {name!r}: max_hold is required (how long one run may hold a slot, "
            f"e.g. '45m'); there is no default on purpose"
        )
    try:
        ms = to_ms(max_hold, f"limit {name!r} max_hold")
    except DuroError as err:
        raise ConfigError(str(err)) from None
    if not 0 < ms <= MAX_HOLD_MS:
        raise ConfigError(
            f"limit {name!r}: max_hold must be more than 0 and at most 30 days, got {max_hold!r}"
        )
    return ms


def _limit(name: Any, spec: Any) -> LimitConfig:
    name = check_limit_name(name)
    capacity: object  # checked below: a Limit's fields or a dict's values, as the user wrote them
    max_hold: object
    per_key: object = None
    if isinstance(spec, Limit):
        capacity, max_hold, per_key = spec.capacity, spec.max_hold, spec.per_key
    elif isinstance(spec, Mapping):
        unknown = set(spec) - {"capacity", "max_hold", "per_key"}
        if unknown:
            raise ConfigError(
                f"limit {name!r}: unknown field(s) {', '.join(sorted(unknown))}; "
                f"a limit has capacity, max_hold and per_key"
            )
        if "capacity" not in spec:
            raise ConfigError(f"limit {name!r}: capacity is required (an integer from 1 to {MAX_CAPACITY})")
        capacity, max_hold, per_key = spec["capacity"], spec.get("max_hold"), spec.get("per_key")
    else:
        raise ConfigError(
            f"limit {name!r}: expected Limit(capacity=..., max_hold=...) or a dict, got {spec!r}"
        )
    capacity = check_capacity(name, capacity)
    return LimitConfig(name, capacity, check_max_hold(name, max_hold), check_per_key(name, per_key, capacity))


def check_per_key(name: str, per_key: Any, capacity: int) -> int | None:
    """A keyed limit's capacity per key: ``None`` (a plain limit) or an integer from 1 to ``capacity``."""
    if per_key is None:
        return None
    if isinstance(per_key, bool) or not isinstance(per_key, int) or not 1 <= per_key <= capacity:
        raise ConfigError(
            f"limit {name!r}: per_key must be an integer from 1 to the limit's capacity ({capacity}), "
            f"got {per_key!r}; leave it out for a limit without keys"
        )
    return per_key


MAX_RATE = 1_000_000
RATE_PER_MS = (1_000, 86_400_000)  # "1s" to "1d"


def check_rate(name: Any, limit: Any, per: Any, per_key: Any = False) -> RateConfig:
    """A rate as declared: its name (as a limit's), ``limit`` from 1 to 1,000,000, ``per`` from
    ``"1s"`` to ``"1d"``, ``per_key`` a bool; a :class:`ConfigError` names the rate and the field."""
    if not isinstance(name, str) or not LIMIT_NAME.match(name):
        raise ConfigError(
            f"rate name {name!r} is invalid: use 1 to 64 lowercase letters, digits, '.', '_' or '-'"
        )
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_RATE:
        raise ConfigError(f"rate {name!r}: limit must be an integer from 1 to {MAX_RATE:,}, got {limit!r}")
    if per is None:
        raise ConfigError(f"rate {name!r}: per is required (the window, e.g. '1m')")
    try:
        per_ms = to_ms(per, f"rate {name!r} per")
    except DuroError as err:
        raise ConfigError(str(err)) from None
    if not RATE_PER_MS[0] <= per_ms <= RATE_PER_MS[1]:
        raise ConfigError(f"rate {name!r}: per must be from '1s' to '1d', got {per!r}")
    if not isinstance(per_key, bool):
        raise ConfigError(f"rate {name!r}: per_key must be True or False, got {per_key!r}")
    return RateConfig(name, limit, per_ms, per_key)


def _rate(name: Any, spec: Any) -> RateConfig:
    if isinstance(spec, Rate):
        return check_rate(name, spec.limit, spec.per, spec.per_key)
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"limit", "per", "per_key"}
        if unknown:
            raise ConfigError(
                f"rate {name!r}: unknown field(s) {', '.join(sorted(unknown))}; a rate has limit, per and per_key"
            )
        if "limit" not in spec:
            raise ConfigError(f"rate {name!r}: limit is required (an integer from 1 to {MAX_RATE:,})")
        return check_rate(name, spec["limit"], spec.get("per"), spec.get("per_key", False))
    raise ConfigError(f"rate {name!r}: expected Rate(limit=..., per=...) or a dict, got {spec!r}")


def _entry(item: Any) -> WorkflowEntry:
    if isinstance(item, str):
        return WorkflowEntry(item)
    if isinstance(item, Mapping):
        unknown = set(item) - {"path", "serial"}
        if unknown or not isinstance(item.get("path"), str):
            raise ConfigError(
                f"workflows entry {dict(item)!r}: use a path string or "
                f"{{'path': 'workflows/x.py', 'serial': True}}"
            )
        serial = item.get("serial", False)
        if not isinstance(serial, bool):
            raise ConfigError(
                f"workflows entry {item['path']!r}: serial must be True or False, got {serial!r}"
            )
        return WorkflowEntry(item["path"], serial)
    raise ConfigError(f"workflows entry {item!r}: use a path string or a dict with 'path' (and 'serial')")


def define_workspace(
    limits: Mapping[str, Limit | Mapping[str, Any]] | None = None,
    workflows: Sequence[str | Mapping[str, Any]] | None = None,
    rates: Mapping[str, Rate | Mapping[str, Any]] | None = None,
    retention: Duration | None = None,
) -> Workspace:
    """Declare the project's limits, its rates, how long finished runs are kept and (optionally)
    its workflow files; validated here, at load.

    ``retention`` (e.g. ``"30d"``; ``None``, the default, keeps every run): finished runs whose end
    is older are deleted in the background, with their steps, signals and ended slots.

    ``workflows=None`` scans ``workflows/``; a list replaces the scan. A :class:`ConfigError` names
    the limit, rate (or entry) and the field at fault.
    """
    if limits is not None and not isinstance(limits, Mapping):
        raise ConfigError(f"limits must be a dict of name -> Limit(...), got {type(limits).__name__}")
    checked = {name: _limit(name, spec) for name, spec in (limits or {}).items()}
    if rates is not None and not isinstance(rates, Mapping):
        raise ConfigError(f"rates must be a dict of name -> Rate(...), got {type(rates).__name__}")
    rate_configs = {name: _rate(name, spec) for name, spec in (rates or {}).items()}
    entries = None
    if workflows is not None:
        if isinstance(workflows, str) or not isinstance(workflows, Sequence):
            raise ConfigError("workflows must be a list of paths (or None to scan workflows/)")
        entries = tuple(_entry(item) for item in workflows)
    return Workspace(
        limits=checked, workflows=entries, rates=rate_configs, retention_ms=check_retention(retention)
    )
