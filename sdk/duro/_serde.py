"""Values and errors to and from stored JSON, driven by type hints.

A type hint (pydantic model, dataclass, ``dict[str, int]``...) validates and serializes through a
pydantic ``TypeAdapter``. With no hint, a value must already be JSON (dict, list, str, int, float,
bool, None). Exceptions are stored as a JSON description plus a pickle when the exception pickles,
so a replay can raise the same type again.
"""

from __future__ import annotations

import base64
import inspect
import json
import pickle
import traceback
from functools import lru_cache
from typing import Any

import pydantic

from ._errors import DuroError

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
    """JSON text describing ``err``: type, message, traceback, and a pickle when possible."""
    data: dict[str, Any] = {
        "type": f"{type(err).__module__}.{type(err).__qualname__}",
        "message": str(err),
        "traceback": "".join(traceback.format_exception(err)),
    }
    try:
        blob = pickle.dumps(err)
        pickle.loads(blob)
        data["pickle"] = base64.b64encode(blob).decode()
    except Exception:  # noqa: BLE001 - an unpicklable error is still described
        pass
    return dump_json(data)


def restore_error(text: str | None) -> BaseException:
    """Rebuild an error from :func:`describe_error`; a :class:`DuroError` when it cannot."""
    if not text:
        return DuroError("unknown error")
    data = json.loads(text)
    blob = data.get("pickle")
    if blob:
        try:
            err = pickle.loads(base64.b64decode(blob))
            if isinstance(err, BaseException):
                return err
        except Exception:  # noqa: BLE001 - the class may be gone; fall back to the description
            pass
    return DuroError(f"{data.get('type', 'Error')}: {data.get('message', '')}")


def error_summary(text: str | None) -> dict[str, Any] | None:
    """The public part of a stored error: type, message and traceback (no pickle)."""
    if not text:
        return None
    data = json.loads(text)
    return {k: data.get(k) for k in ("type", "message", "traceback")}
