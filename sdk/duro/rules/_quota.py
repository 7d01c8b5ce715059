"""Quota admission: a pure decision, no I/O and no clock.

The store counts the active runs of a key and applies the decision in the same transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import median

RETRY_AFTER_MAX_S = 300  # an estimate never tells a caller to wait longer than 5 minutes
RECENT_RUNS = 20  # how many of a key's last completed runs the estimate looks at


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


def retry_after(durations_ms: Sequence[int], active: int, limit: int) -> int:
    """Seconds a refused start should wait before trying again, from how long (ms, creation to end)
    the key's last completed runs lasted. With their median ``T`` and the ``active`` runs ending
    spread over ``T``, a place frees once ``active - limit + 1`` of them have ended: after about
    ``T * (active - limit + 1) / active`` (``T / active`` for a quota just full). 1 with no
    history; the most, 5 minutes, for a quota that admits nothing (``limit <= 0``). Always between
    1 and ``RETRY_AFTER_MAX_S``, rounded up."""
    if limit <= 0:
        return RETRY_AFTER_MAX_S
    if not durations_ms:
        return 1
    typical_ms = int(median(max(0, ms) for ms in durations_ms))
    active = max(1, active)
    must_end = min(active, max(1, active - limit + 1))
    seconds = -(-typical_ms * must_end // (1000 * active))  # rounded up
    return min(RETRY_AFTER_MAX_S, max(1, seconds))
