"""A slot's row and a limit's row as the store reads and writes them (see ``._slots``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from .._slots import SlotRow
from ._queries import SLOT_COLUMNS


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


def slot_row(values: Any) -> SlotRow:
    data = dict(zip(SLOT_COLUMNS, values, strict=True))
    data["limit"] = data.pop("limit_name")
    data.pop("due_at")
    return SlotRow(**data)


def slot_values(row: SlotRow) -> dict[str, Any]:
    return {
        "id": row.id,
        "limit_name": row.limit,
        "run_id": row.run_id,
        "state": row.state,
        "pos": row.pos,
        "label": row.label,
        "enqueued_at": row.enqueued_at,
        "timeout_at": row.timeout_at,
        "reserved_until": row.reserved_until,
        "granted_at": row.granted_at,
        "held_since": row.held_since,
        "max_hold_ms": row.max_hold_ms,
        "expires_at": row.expires_at,
        "ended_at": row.ended_at,
        "reason": row.reason,
        "due_at": row.due_at,
    }


def slot_json(row: SlotRow) -> str:
    return json.dumps({"id": row.id, "limit": row.limit, "label": row.label})
