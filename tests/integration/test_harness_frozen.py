"""A module first imported while the harness has frozen time: its classes are built on the real
``date`` and ``datetime`` (a metaclass of its own included), and its code reads simulated time."""

from __future__ import annotations

import datetime
import importlib
import sys
import textwrap

from duro_harness import simulated

REAL = (datetime.date, datetime.datetime)  # a tuple: freezegun rebinds module names of the real classes

MODULE = """
    from datetime import date, datetime

    class Meta(type):
        pass

    class Deadline(date, metaclass=Meta):  # what pydantic.v1 does with its ConstrainedDate
        pass

    class Stamp(datetime):
        pass

    def today():
        return date.today()
"""


async def test_a_module_imported_under_the_freeze_keeps_the_real_classes(tmp_path, monkeypatch):
    (tmp_path / "late_dates.py").write_text(textwrap.dedent(MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        async with simulated(start="2031-06-01T08:00:00Z"):
            late = importlib.import_module("late_dates")
            assert (late.Deadline.__base__, late.Stamp.__base__) == REAL
            assert datetime.date is not REAL[0]  # time is frozen: the module's names are freezegun's
            assert late.today() == datetime.date(2031, 6, 1)  # simulated time
        assert late.date is datetime.date and late.today() != datetime.date(2031, 6, 1)  # real again
        assert late.Deadline(2030, 1, 2).year == 2030
    finally:
        sys.modules.pop("late_dates", None)
