"""Log output of ``duro dev``, ``duro serve`` and ``duro worker``: ``--log-format text`` or ``json``.

- ``text`` (the default): the ``duro.*`` lines as ``INFO:     duro.limits: slot of limit ... granted``
  (uvicorn's own lines keep uvicorn's format), and the server's own messages (``duro.devserver``:
  serving, loaded, reloading, a load error) exactly as ``duro: ...`` lines.
- ``json``: one JSON object per line, for a log shipper: ``ts`` (ISO 8601, UTC), ``level``,
  ``logger``, ``message``, and every field the line was given as ``extra`` (``event``, ``limit``,
  ``workflow``, ``wait_ms``, ``held_ms``, ``quota_limit``, ...); nothing else of the log record. A
  traceback is part of ``message``. In the servers uvicorn's lines come out the same way.

The ``duro.*`` loggers print at INFO: every slot grant, expiry, timeout and lapsed reservation
(``duro.limits``) and every refused start (``duro.quota``). Standard library ``logging`` only.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

FORMATS = ("text", "json")

log = logging.getLogger("duro.devserver")
"""The servers' own messages: serving, loaded, reloading, load errors."""

# what every LogRecord carries; the rest of its __dict__ came as ``extra``
_RECORD_FIELDS = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",  # Python 3.12+
    "color_message",  # uvicorn's copy of the message with terminal colours
}


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields ``record`` was given as ``extra``, in the order given."""
    return {key: value for key, value in vars(record).items() if key not in _RECORD_FIELDS}


def _message(formatter: logging.Formatter, record: logging.LogRecord) -> str:
    message = record.getMessage()
    if record.exc_info and not record.exc_text:
        record.exc_text = formatter.formatException(record.exc_info)
    if record.exc_text:
        message = f"{message}\n{record.exc_text}"
    if record.stack_info:
        message = f"{message}\n{formatter.formatStack(record.stack_info)}"
    return message


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line: ``ts``, ``level``, ``logger``, ``message`` and the
    record's ``extra`` fields (a value JSON cannot hold is written as its ``str``)."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": _message(self, record),
        }
        for key, value in extra_fields(record).items():
            line.setdefault(key, value)  # an extra named like a field above does not replace it
        return json.dumps(line, ensure_ascii=False, default=str)


class TextFormatter(logging.Formatter):
    """``LEVEL:    logger: message`` (the level padded as uvicorn pads it); the servers' own
    messages (``duro.devserver``) as ``duro: message``."""

    def format(self, record: logging.LogRecord) -> str:
        message = _message(self, record)
        if record.name == log.name:
            return f"duro: {message}"
        return f"{record.levelname + ':':<9} {record.name}: {message}"


def logging_config(log_format: str, *, loggers: Iterable[str] = ()) -> dict[str, Any]:
    """A :func:`logging.config.dictConfig` dictionary: the ``duro`` loggers (and ``loggers``, e.g.
    uvicorn's) print to stderr in ``log_format`` at INFO. Loggers it does not name keep theirs."""
    if log_format not in FORMATS:
        raise ValueError(f"log format {log_format!r}: use one of {', '.join(FORMATS)}")
    formatter = JsonFormatter if log_format == "json" else TextFormatter
    route = {"handlers": ["duro"], "level": "INFO", "propagate": False}
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"duro": {"()": formatter}},
        "handlers": {
            "duro": {"class": "logging.StreamHandler", "formatter": "duro", "stream": "ext://sys.stderr"}
        },
        "loggers": {name: dict(route) for name in ("duro", *loggers)},
    }
