"""duro's time-travelling test harness.

``async with simulated(project) as env:`` — or the ``duro_env`` pytest fixture, registered by this
package's pytest plugin — runs a project's workflows on a fresh SQLite store and a simulated clock:
``await env.advance("3d")`` fires every timer due on the way — sleeps, signal timeouts, retry delays,
slot timeouts, reservations, ``max_hold``, the limits' 15 s pass, schedules — in time order, in
milliseconds of wall time; ``await env.restart()`` simulates a machine restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from duro.tooling import lazy_names

if TYPE_CHECKING:
    from ._clock import DEFAULT_START, SimulatedClock
    from ._env import DuroEnv, simulated

__all__ = ["DuroEnv", "simulated", "SimulatedClock", "DEFAULT_START"]

# Each name loads its module on first use: the pytest plugin, imported with this package, loads none.
__getattr__, __dir__ = lazy_names(
    globals(),
    {
        "._clock": (
            "DEFAULT_START",
            "SimulatedClock",
        ),
        "._env": (
            "DuroEnv",
            "simulated",
        ),
    },
)
