"""Every public name has a docstring: the names in ``duro.__all__``, ``duro.tooling`` and
``duro.testing``, the public methods and properties of their classes, and the parts an engine
exposes (``engine.limits``, ``engine.schedules``, ``engine.events``)."""

from __future__ import annotations

import inspect

import duro
import duro.testing
import duro.tooling
from duro._events import EventBus
from duro.limits import Limits
from duro.worker._schedules import Schedules


def _undocumented(name: str, obj: object) -> list[str]:
    missing = [] if (inspect.getdoc(obj) or "").strip() else [name]
    if inspect.isclass(obj):
        for attr, member in vars(obj).items():
            if attr.startswith("_"):
                continue
            function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
            if callable(function) and not (function.__doc__ or "").strip():
                missing.append(f"{name}.{attr}")
    return missing


def test_every_public_name_has_a_docstring():
    missing = []
    for module in (duro, duro.tooling, duro.testing):
        for name in module.__all__:
            missing += _undocumented(f"{module.__name__}.{name}", getattr(module, name))
    for part in (Limits, Schedules, EventBus):
        missing += _undocumented(part.__name__, part)
    assert missing == []


def test_the_engine_has_no_undocumented_public_member():
    public = [name for name in vars(duro.Engine) if not name.startswith("_")]
    assert "start" in public and "limits" not in public  # its methods and properties (parts are attributes)
    assert [name for name in public if not (inspect.getdoc(getattr(duro.Engine, name)) or "").strip()] == []
