"""duro's test harness: a simulated clock that fast-forwards durable time, and a pytest plugin.

This release ships the simulated clock and the plugin's runner for ``async def`` tests; the
``duro_env`` fixture and ``simulated()`` environment build on them.
"""

from ._clock import SimulatedClock

__all__ = ["SimulatedClock"]
