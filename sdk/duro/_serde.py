"""Values and errors to and from stored JSON, driven by type hints.

A type hint (pydantic model, dataclass, ``dict[str, int]``...) validates and serializes through a
pydantic ``TypeAdapter``. With no hint, a value must already be JSON (dict, list, str, int, float,
bool, None). Exceptions are stored as a JSON description (type, message, traceback, and the
arguments that build the same exception again), so a replay raises the same type again; nothing
stored is ever unpickled.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys
import traceback
import typing
from functools import lru_cache
from typing import Any

import pydantic

from ._errors import CALL_SEQ, DuroError, NonDeterminismError, RunCancelled

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
        """Validate a value given by the caller (a model instance, or its dict form). An instance of
        a class of the hint from another import of its module (same module and qualified name, a
        different class object) is taken from its fields."""
        if self._adapter is None:
            self.dump(value)
            return value
        try:
            return self._adapter.validate_python(value)
        except pydantic.ValidationError:
            rebuilt = _rebuilt(value, hint_classes(self.hint))
            if rebuilt is value:
                raise
        return self._adapter.validate_python(rebuilt)

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
        # stored by field name (dump's default): a field with an alias is read back by its name
        return self._adapter.validate_json(text, by_name=True)

    def json_schema(self) -> dict[str, Any]:
        if self._adapter is None:
            return {}
        try:
            return self._adapter.json_schema()
        except pydantic.PydanticUserError:  # types pydantic can validate but not describe
            return {}


def qualified_name(cls: type) -> str:
    """``module.QualName`` of a class: what tells apart two classes of one name."""
    return f"{cls.__module__}.{cls.__qualname__}"


def is_structured(cls: Any) -> bool:
    return isinstance(cls, type) and (issubclass(cls, pydantic.BaseModel) or dataclasses.is_dataclass(cls))


def _field_hints(cls: type) -> list[Any]:
    if issubclass(cls, pydantic.BaseModel):
        return [field.annotation for field in cls.model_fields.values()]
    fields = getattr(cls, "__pydantic_fields__", None)  # a pydantic dataclass: its resolved hints
    if isinstance(fields, dict):
        return [field.annotation for field in fields.values()]
    try:
        return list(typing.get_type_hints(cls).values())
    except Exception:  # noqa: BLE001 - a hint that cannot be resolved names no class to look for
        return []


@lru_cache(maxsize=256)
def hint_classes(hint: Any) -> dict[tuple[str, str], type]:
    """The pydantic models and dataclasses a type hint names, at any depth (fields of models, items
    of lists, members of unions), by (module, qualified name)."""
    found: dict[tuple[str, str], type] = {}
    pending, seen = [hint], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        pending.extend(typing.get_args(current))
        if is_structured(current):
            found[(current.__module__, current.__qualname__)] = current
            pending.extend(_field_hints(current))
    return found


def _rebuilt(value: Any, known: dict[tuple[str, str], type]) -> Any:
    """``value`` with every instance of a class of another import of the hint's modules (a twin of a
    class in ``known``) replaced by an instance of the hint's class, validated from its fields;
    ``value`` itself when it holds none."""
    cls = type(value)
    target = known.get((cls.__module__, cls.__qualname__))
    if target is not None and target is not cls and is_structured(cls):
        if isinstance(value, pydantic.BaseModel):
            fields = {name: _rebuilt(getattr(value, name), known) for name in type(value).model_fields}
            fields.update(value.__pydantic_extra__ or {})
        else:
            fields = {
                f.name: _rebuilt(getattr(value, f.name), known) for f in dataclasses.fields(value) if f.init
            }
        return _adapter(target).validate_python(fields, by_name=True)
    if isinstance(value, dict):
        items = {key: _rebuilt(item, known) for key, item in value.items()}
        changed = any(items[key] is not item for key, item in value.items())
        return items if changed else value
    if isinstance(value, list | tuple | set | frozenset):
        members = [_rebuilt(item, known) for item in value]
        if all(new is old for new, old in zip(members, value, strict=True)):
            return value
        if isinstance(value, list):
            return members
        return type(value)(*members) if hasattr(value, "_fields") else type(value)(members)
    return value


def dump_json(value: Any) -> str:
    """Strict JSON text: ``NaN`` and ``Infinity`` are refused (``ValueError``) as in an input, for
    no JSON reader but Python's takes them; so is a value nested too deeply to encode (rather than
    a ``RecursionError`` from deep inside the encoder)."""
    try:
        return json.dumps(value, separators=(",", ":"), allow_nan=False)
    except RecursionError:
        raise ValueError(
            "it is nested too deeply (more than about 900 levels of lists and objects)"
        ) from None


def describe_error(err: BaseException, call_seq: int | None = None) -> str:
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
    if call_seq is not None:  # a run's error: the durable call that raised it (see duro.rules._resume)
        data["call_seq"] = call_seq
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
            "attributes": {
                str(name): _encode(value) for name, value in attributes.items() if name != CALL_SEQ
            },
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
    if not isinstance(found, type):
        return None
    # an Exception, or duro's cancel: a stored SystemExit or KeyboardInterrupt is never rebuilt, so
    # a row (hostile or corrupt) cannot stop the process reading it
    return found if issubclass(found, Exception) or found is RunCancelled else None


UNREADABLE = "duro_unreadable"  # the key of a stored value that is not JSON (see stored_json)


def stored_json(text: str) -> Any:
    """A stored JSON value (an input, output, step result or detail) for a reader; one that is not
    JSON (a corrupt or hostile row) reads as ``{"duro_unreadable": <its first 200 characters>}``:
    that field is unreadable, the rest of the run, its page and the process are not affected."""
    try:
        return json.loads(text)
    except (ValueError, TypeError, RecursionError):
        return {UNREADABLE: str(text)[:200]}


def _stored_error(text: str) -> dict[str, Any] | None:
    try:
        data = json.loads(text)
    except (ValueError, TypeError, RecursionError):
        return None
    return data if isinstance(data, dict) else None


def restore_error(text: str | None) -> BaseException:
    """Rebuild an error from :func:`describe_error`: the same class with the same arguments when the
    class is loaded here and is an ``Exception`` (or duro's ``RunCancelled``), else a
    :class:`DuroError` naming its type and message (and one saying so for text that is not JSON).

    Never unpickles: the stored text is data, and rebuilding calls only an exception class already
    loaded in this process, with JSON arguments. (Errors stored by older versions carried a pickle;
    they come back as that DuroError.)"""
    if not text:
        return DuroError("unknown error")
    data = _stored_error(text)
    if data is None:
        return DuroError(f"a stored error is unreadable (not duro's JSON): {str(text)[:200]!r}")
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
    data = _stored_error(text)
    if data is None:
        return {"type": UNREADABLE, "message": f"not duro's JSON: {str(text)[:200]}", "traceback": None}
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
