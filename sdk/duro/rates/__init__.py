"""Rates: at most ``limit`` granted in any window of ``per``, with a durable FIFO queue per key.

- the pure decisions: :mod:`duro.rules._rates` (the window rule, the next grant's instant);
- the records: :mod:`._types` (``RateGrant``, ``RateInfo``, ``RateWaiter``);
- in workflow code, and this process's waiting runs and the grant loop: :mod:`._acquire`
  (``acquire_rate``; ``LocalRates``);
- for operators: :mod:`._admin` (``engine.rates``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_names

if TYPE_CHECKING:
    from ._acquire import LocalRates, RunRates, acquire_rate
    from ._admin import Rates
    from ._types import HOOK_PREFIX, RateGrant, RateInfo, RateWaiter, rate_config

__all__ = [
    "HOOK_PREFIX",
    "LocalRates",
    "RateGrant",
    "RateInfo",
    "RateWaiter",
    "Rates",
    "RunRates",
    "acquire_rate",
    "rate_config",
]

# Each name loads its module on first use: workflow code's acquire_rate loads no operator's tools.
__getattr__, __dir__ = lazy_names(
    globals(),
    {
        "._acquire": (
            "LocalRates",
            "RunRates",
            "acquire_rate",
        ),
        "._admin": ("Rates",),
        "._types": (
            "HOOK_PREFIX",
            "RateGrant",
            "RateInfo",
            "RateWaiter",
            "rate_config",
        ),
    },
)
