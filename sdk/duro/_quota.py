"""Quota admission: a pure decision, no I/O and no clock.

The store counts the active runs of a key and applies the decision in the same transaction.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Admission:
    admitted: bool
    key: str | None
    limit: int | None
    active: int


def admit(key: str | None, limit: int | None, active: int) -> Admission:
    """Admit a start unless ``active`` runs already use up ``limit``. ``limit <= 0`` rejects all."""
    if key is None or limit is None:
        return Admission(True, key, limit, active)
    return Admission(active < limit, key, limit, active)
