"""The rows the store's parts share, as values: a step's and a slot's as written, a run's, a slot's
and a limit's as read (no I/O: the fence every write of a run passes is the connector's, see
``Connector.write_step``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .._states import WAITING
from ..definitions._config import LimitConfig
from ..rules._slots import LimitView, SlotRow
from ._queries import RUN_COLUMNS, SLOT_COLUMNS, STEP_COLUMNS
from ._records import RunRecord, StepRecord


def step_values(run_id: str, step: StepRecord) -> dict[str, Any]:
    return dict(zip(STEP_COLUMNS, (run_id, *step), strict=True))


def due_for(status: str, wake_at: int | None, now: int) -> int | None:
    """When a run written with ``status`` (and timer ``wake_at``) at ``now`` falls due if nobody
    holds it: a waiting run when its timer ends (never, with no timer: what it waits for makes it
    due), any other at once (see ``_tables.Run.due_at``)."""
    return wake_at if status in WAITING else now


@dataclass(frozen=True)
class LimitState:
    """A limit's row: overrides and live counts (for the admin listing)."""

    name: str
    capacity_override: int | None
    max_hold_override_ms: int | None
    busy: int
    reserved: int
    waiting: int
    capacity: int | None = None  # as declared by the last worker to start with it in its config
    max_hold_ms: int | None = None
    per_key: int | None = None


def slot_row(values: Any) -> SlotRow:
    """A slot's row as selected (``SLOT_COLUMNS``: its fields, then ``due_at``, which it derives)."""
    return SlotRow(*values[:-1])


def slot_values(row: SlotRow) -> dict[str, Any]:
    return dict(zip(SLOT_COLUMNS, (*row, row.due_at), strict=True))


def limit_view(config: LimitConfig, row: Sequence[Any]) -> tuple[LimitView, int]:
    """A limit as its locked row (``limit_lock``) and its config say, and the instant to judge by."""
    capacity_override, max_hold_override, busy, reserved, waiting, next_pos, judged = row[:7]
    return LimitView(
        name=config.name,
        capacity=capacity_override or config.capacity,
        max_hold_ms=max_hold_override or config.max_hold_ms,
        busy=busy,
        reserved=reserved,
        waiting=waiting,
        next_pos=next_pos,
        per_key=config.per_key,
    ), int(judged)


def to_run(row: Any) -> RunRecord:
    values = dict(zip(RUN_COLUMNS, row, strict=True))
    try:
        tags = json.loads(values["tags"] or "[]")
    except ValueError:
        tags = []  # a corrupt or hostile row: its tags are unreadable, the run is not
    values["tags"] = tags if isinstance(tags, list) else []
    return RunRecord(**values)
