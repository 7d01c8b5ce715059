"""Values and errors to and from stored JSON, driven by type hints.

A type hint (pydantic model, dataclass, ``dict[str, int]``...) validates and serializes through a
pydantic ``TypeAdapter``. With no hint, a value must already be JSON (dict, list, str, int, float,
bool, None). Exceptions are stored as a JSON description (type, message, traceback, and the
arguments that build the same exception again), so a replay raises the same type again; nothing
stored is ever unpickled.
"""

from __future__ import annotations

import inspect
import json
import sys
import traceback
from functools import lru_cache
from typing import Any

import pydantic

from ._errors import DuroError, NonDeterminismError

_NO_HINT = inspect.Parameter.empty


@lru_cache(maxsize=1024)
def _adapter(hint: Any) -> pydantic.TypeAdapter[Any]:
    return pydantic.TypeAdapter(hint)


class Codec:
    """Validates and (de)serializes one declared type. ``Codec(None)`` means "any JSON value"."""

    __slots__ = ("hint", "_adapter")

    def __init__(self, hint: Any) -> None:
        self.hint = None if hint in (_NO_HINT, Any) else hint
        self._adapter = None if self.hint is None else _adapter(self.hint)

    def validate(self, value: Any) -> Any:
        """Validate a value given by the caller (a model instance, or its dict form)."""
        if self._adapter is None:
            self.dump(value)
            return value
        return self._adapter.validate_python(value)

    def dump(self, value: Any) -> str:
        """Serialize to JSON text; raises TypeError / pydantic errors when it cannot."""
        if self._adapter is None:
            return json.dumps(value, allow_nan=False, separators=(",", ":"))
        return self._adapter.dump_json(value).decode()

    def load(self, text: str | None) -> Any:
        if text is None:
            return None
        if self._adapter is None:
            return json.loads(text)
        return self._adapter.validate_json(text)

    def json_schema(self) -> dict[str, Any]:
        if self._adapter is None:
            return {}
        try:
            return self._adapter.json_schema()
        except pydantic.PydanticUserError:  # types pydantic can validate but not describe
            return {}


def dump_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def describe_error(err: BaseException) -> str:
    """JSON text describing ``err``: type, message, traceback, and how to build it again (its class's
    constructor arguments and attributes, when they are JSON; nested errors described alike).

    A :class:`NonDeterminismError` also gets ``detail``: ``{"seq", "recorded", "asked"}``, for a
    reader (Studio) that shows both calls side by side."""
    data: dict[str, Any] = {
        "type": f"{type(err).__module__}.{type(err).__qualname__}",
        "module": type(err).__module__,
        "qualname": type(err).__qualname__,
        "message": str(err),
        "traceback": "".join(traceback.format_exception(err)),
    }
    state = _state(err)
    if state is not None:
        data["state"] = state
    if isinstance(err, NonDeterminismError):
        data["detail"] = {"seq": err.seq, "recorded": err.recorded, "asked": err.asked}
    return dump_json(data)


class _NotJSON(Exception):
    pass


def _state(err: BaseException) -> dict[str, Any] | None:
    """The arguments ``err``'s class is called with to build it again (what ``__reduce_ex__`` says,
    as pickle would use it) and its attributes, as JSON; ``None`` when they are not JSON."""
    try:
        reduced = err.__reduce_ex__(4)
    except Exception:  # noqa: BLE001 - an error that cannot say how it is built is still described
        return None
    if not isinstance(reduced, tuple) or len(reduced) < 2 or reduced[0] is not type(err):
        return None
    attributes = reduced[2] if len(reduced) > 2 and isinstance(reduced[2], dict) else {}
    try:
        return {
            "args": [_encode(value) for value in reduced[1]],
            "attributes": {str(name): _encode(value) for name, value in attributes.items()},
        }
    except _NotJSON:
        return None


def _encode(value: Any) -> dict[str, Any]:
    if isinstance(value, BaseException):
        return {"error": json.loads(describe_error(value))}
    try:
        json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        raise _NotJSON from None
    return {"value": value}


def _decode(item: dict[str, Any]) -> Any:
    if "error" in item:
        return restore_error(dump_json(item["error"]))
    return item["value"]


def _loaded_class(module: Any, qualname: Any) -> type[BaseException] | None:
    """The exception class named, if its module is already imported (nothing is imported, and no
    code runs, because a database said so) and it is an exception class."""
    if not isinstance(module, str) or not isinstance(qualname, str):
        return None
    found: Any = sys.modules.get(module)
    for part in qualname.split("."):
        if found is None or part.startswith("<"):
            return None
        found = getattr(found, part, None)
    return found if isinstance(found, type) and issubclass(found, BaseException) else None


def restore_error(text: str | None) -> BaseException:
    """Rebuild an error from :func:`describe_error`: the same class with the same arguments when the
    class is loaded here, else a :class:`DuroError` naming its type and message.

    Never unpickles: the stored text is data, and rebuilding calls only an exception class already
    loaded in this process, with JSON arguments. (Errors stored by older versions carried a pickle;
    they come back as that DuroError.)"""
    if not text:
        return DuroError("unknown error")
    data = json.loads(text)
    cls = _loaded_class(data.get("module"), data.get("qualname"))
    state = data.get("state")
    if cls is not None and isinstance(state, dict):
        try:
            err = cls(*[_decode(item) for item in state.get("args", [])])
            for name, item in state.get("attributes", {}).items():
                setattr(err, name, _decode(item))
            return err
        except Exception:  # noqa: BLE001 - the class changed since: fall back to the description
            pass
    return DuroError(f"{data.get('type', 'Error')}: {data.get('message', '')}")


def error_summary(text: str | None) -> dict[str, Any] | None:
    """The public part of a stored error: type, message and traceback, and ``detail`` when the error
    has one (a :class:`NonDeterminismError`'s ``seq``, ``recorded`` and ``asked``)."""
    if not text:
        return None
    data = json.loads(text)
    summary = {k: data.get(k) for k in ("type", "message", "traceback")}
    detail = data.get("detail") or _divergence(data)
    if isinstance(detail, dict):
        summary["detail"] = detail
    return summary


def _divergence(data: dict[str, Any]) -> dict[str, Any] | None:
    """A NonDeterminismError stored before ``detail`` existed: its constructor arguments say it."""
    if (data.get("module"), data.get("qualname")) != (NonDeterminismError.__module__, "NonDeterminismError"):
        return None
    args = (data.get("state") or {}).get("args") or []
    if len(args) != 4 or not all(isinstance(arg, dict) and "value" in arg for arg in args):
        return None
    _, seq, recorded, asked = (arg["value"] for arg in args)
    return {"seq": seq, "recorded": recorded, "asked": asked}
