"""Limits: named slots with a capacity, a durable FIFO queue and ``max_hold``.

- the pure decisions: :mod:`duro.rules._slots` (grant, reserve, confirm, expire, release, requeue);
- the records: :mod:`._types` (``Slot``, ``SlotRelease``, ``LimitInfo``, ``SlotInfo``);
- in workflow code, and this process's waiting runs and the expiry loop: :mod:`._acquire`
  (``acquire_slot``, ``release_slot``, ``with_limit``, ``limit_slot``; ``LocalSlots``);
- for operators: :mod:`._admin` (``engine.limits``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from ._acquire import LocalSlots, RunLimits, acquire_slot, limit_slot, release_slot, with_limit
    from ._admin import Limits
    from ._types import HOOK_PREFIX, LimitInfo, LimitKey, Slot, SlotInfo, SlotRelease, SlotsPage, limit_config

__all__ = [
    "HOOK_PREFIX",
    "LimitInfo",
    "LimitKey",
    "Limits",
    "LocalSlots",
    "RunLimits",
    "Slot",
    "SlotInfo",
    "SlotsPage",
    "SlotRelease",
    "acquire_slot",
    "limit_config",
    "limit_slot",
    "release_slot",
    "with_limit",
]

# Each name loads its module on first use: workflow code's acquire_slot loads no operator's tools.
__getattr__, __dir__ = lazy_names(
    globals(),
    {
        "._acquire": (
            "LocalSlots",
            "RunLimits",
            "acquire_slot",
            "limit_slot",
            "release_slot",
            "with_limit",
        ),
        "._admin": ("Limits",),
        "._types": (
            "HOOK_PREFIX",
            "LimitInfo",
            "LimitKey",
            "Slot",
            "SlotInfo",
            "SlotsPage",
            "SlotRelease",
            "limit_config",
        ),
    },
)
