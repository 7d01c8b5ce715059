"""duro's time-travelling test harness.

``async with simulated(project) as env:`` — or the ``duro_env`` pytest fixture, registered by this
package's pytest plugin — runs a project's workflows on a fresh SQLite store and a simulated clock:
``await env.advance("3d")`` fires every sleep, signal timeout and retry delay due on the way, in
time order, in milliseconds of wall time; ``await env.restart()`` simulates a box restart.
"""

from ._clock import DEFAULT_START, SimulatedClock
from ._env import DuroEnv, simulated

__all__ = ["DuroEnv", "simulated", "SimulatedClock", "DEFAULT_START"]
