"""``duro_devserver.logs``: the JSON lines carry ts, level, logger, message and the record's ``extra``
fields, nothing else; the text lines; the logging configuration the servers and the worker apply."""

from __future__ import annotations

import json
import logging
import logging.config
import sys
from collections.abc import Iterator
from datetime import datetime

import pytest
from click.testing import CliRunner

from duro_devserver.cli import main
from duro_devserver.logs import JsonFormatter, TextFormatter, extra_fields, logging_config

CREATED = 1_767_225_600.25  # 2026-01-01T00:00:00.250Z


def record(
    name: str = "duro.limits",
    level: int = logging.INFO,
    msg: str = "slot of limit %s granted after waiting %d ms",
    args: tuple[object, ...] = ("voice-calls", 12),
    extra: dict[str, object] | None = None,
    exc_info: object = None,
) -> logging.LogRecord:
    made = logging.getLogger(name).makeRecord(
        name,
        level,
        "/app/where.py",
        42,
        msg,
        args,
        exc_info,
        extra=extra,
    )
    made.created = CREATED
    return made


def test_a_json_line_has_the_four_fields_and_the_extra_ones_only():
    line = json.loads(
        JsonFormatter().format(record(extra={"event": "slot.granted", "limit": "voice-calls", "wait_ms": 12}))
    )
    assert line == {
        "ts": "2026-01-01T00:00:00.250+00:00",
        "level": "INFO",
        "logger": "duro.limits",
        "message": "slot of limit voice-calls granted after waiting 12 ms",
        "event": "slot.granted",
        "limit": "voice-calls",
        "wait_ms": 12,
    }
    assert datetime.fromisoformat(line["ts"]).utcoffset().total_seconds() == 0


def test_a_json_line_without_extra_fields_and_the_quota_fields():
    assert set(json.loads(JsonFormatter().format(record()))) == {"ts", "level", "logger", "message"}
    refused = record(
        "duro.quota",
        msg="start of workflow %s refused: its concurrency key is at its limit (%d)",
        args=("turn", 1),
        extra={"event": "quota.refused", "workflow": "turn", "quota_limit": 1},
    )
    line = json.loads(JsonFormatter().format(refused))
    assert (line["logger"], line["event"], line["workflow"], line["quota_limit"]) == (
        "duro.quota",
        "quota.refused",
        "turn",
        1,
    )
    assert "pathname" not in line and "args" not in line and "lineno" not in line


def test_an_extra_never_replaces_a_field_and_odd_values_become_text():
    line = json.loads(
        JsonFormatter().format(record(extra={"level": "fake", "ts": 0, "when": datetime(2026, 1, 2)}))
    )
    assert line["level"] == "INFO" and line["ts"].startswith("2026-01-01")
    assert line["when"] == "2026-01-02 00:00:00"


def test_a_traceback_is_part_of_the_message_and_the_line_stays_one_line():
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        failed = record(
            "uvicorn.error", logging.ERROR, "Exception in ASGI application", (), None, sys.exc_info()
        )
    text = JsonFormatter().format(failed)
    assert "\n" not in text
    line = json.loads(text)
    assert set(line) == {"ts", "level", "logger", "message"}
    assert line["message"].startswith("Exception in ASGI application\nTraceback")
    assert "RuntimeError: boom" in line["message"]


def test_uvicorns_coloured_copy_of_the_message_is_not_a_field():
    coloured = record("uvicorn.error", msg="Started", args=(), extra={"color_message": "\x1b[1mStarted"})
    assert extra_fields(coloured) == {}
    assert "color_message" not in json.loads(JsonFormatter().format(coloured))


def test_text_lines():
    text = TextFormatter()
    assert (
        text.format(record())
        == "INFO:     duro.limits: slot of limit voice-calls granted after waiting 12 ms"
    )
    assert text.format(record(level=logging.WARNING, msg="taken back", args=())) == (
        "WARNING:  duro.limits: taken back"
    )
    assert text.format(record("duro.devserver", msg="loaded %s", args=("/p",))) == "duro: loaded /p"


@pytest.fixture
def restore_duro_logger() -> Iterator[None]:
    logger = logging.getLogger("duro")
    saved = (logger.handlers[:], logger.level, logger.propagate)
    try:
        yield
    finally:
        logger.handlers[:], logger.level, logger.propagate = saved


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_the_configuration_shows_duro_lines_at_info(log_format, restore_duro_logger, capsys):
    logging.config.dictConfig(logging_config(log_format))
    logging.getLogger("duro.limits").info(
        "slot request of limit %s timed out in the queue",
        "voice-calls",
        extra={"event": "slot.timed_out", "limit": "voice-calls"},
    )
    logging.getLogger("duro.limits").debug("not shown")
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1
    if log_format == "json":
        assert json.loads(err[0])["event"] == "slot.timed_out"
    else:
        assert err[0] == "INFO:     duro.limits: slot request of limit voice-calls timed out in the queue"


def test_an_unknown_format_is_refused():
    with pytest.raises(ValueError, match="text, json"):
        logging_config("xml")
    answer = CliRunner().invoke(main, ["worker", ".", "--log-format", "xml"])
    assert answer.exit_code == 2 and "'xml' is not one of 'text', 'json'" in answer.output
