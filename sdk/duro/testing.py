"""Building blocks for test tooling (the duro harness uses these; so may other test runners).

Stable names: ``duration_ms``, ``datetime_to_ms``, ``ms_to_datetime``, ``EngineCrash``,
``load_project``, ``Project``, ``RunEvent``, ``LimitConfig``.
"""

from ._clock import datetime_to_ms, ms_to_datetime
from ._config import LimitConfig
from ._durations import to_ms as duration_ms
from ._errors import EngineCrash
from ._events import RunEvent
from ._scan import Project, load_project

__all__ = ["duration_ms", "datetime_to_ms", "ms_to_datetime", "EngineCrash", "load_project", "Project",
           "RunEvent", "LimitConfig"]
