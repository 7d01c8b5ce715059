"""The CLI's tables for people, its JSON argument errors and the messages of refused requests."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from duro_devserver.cli import main
from duro_devserver.cli_api import (
    INPUT_EXAMPLE,
    CliFailure,
    describe_api_error,
    dump_json,
    format_elapsed,
    format_time,
    parse_capacity,
    parse_json_argument,
    parse_max_hold,
    render_cancelled,
    render_capacity,
    render_limits,
    render_max_hold,
    render_released,
    render_run,
    render_runs,
    render_slots,
    render_started,
    table,
)
from duro_devserver.client import ApiError, Target

T0 = "2026-11-30T07:26:08.123000+00:00"
TARGET = Target(
    url="http://127.0.0.1:8787",
    token=None,
    description="the dev server at http://127.0.0.1:8787",
    unreachable_hint="is `duro dev` running?",
    token_hint="set DURO_TOKEN to it",
)


def limit(**over):
    base = {
        "name": "calls",
        "capacity": 20,
        "effective_capacity": 20,
        "max_hold": "45m",
        "effective_max_hold": "45m",
        "capacity_override": None,
        "max_hold_override": None,
        "busy": 3,
        "reserved": 1,
        "waiting": 12,
    }
    return {**base, **over}


def slot(state, n, **over):
    base = {
        "id": f"calls:{n}",
        "limit": "calls",
        "state": state,
        "run_id": f"run-{n}",
        "label": f"label-{n}",
        "position": None,
        "enqueued_at": T0,
        "waited_ms": None,
        "held_since": None,
        "expires_at": None,
        "reserved_until": None,
        "timeout_at": None,
    }
    return {**base, **over}


def columns(line):
    return line.split()


# -- generic pieces ---------------------------------------------------------------------------------


def test_table_aligns_columns_and_right_aligns_numbers():
    text = table(["NAME", "N"], [["a", 5], ["long-name", 125]], right=(1,))
    assert text.splitlines() == ["NAME         N", "a            5", "long-name  125"]


def test_table_cells_escape_control_characters_and_show_none_as_a_dash():
    text = table(["A", "B"], [["x\ny\x1b[31m", None]])
    assert text.splitlines()[1] == "x\\ny\\x1b[31m  -"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (T0, "2026-11-30 07:26:08"),
        ("2026-11-30T09:26:08+02:00", "2026-11-30 07:26:08"),
        (None, "-"),
        ("yesterday", "yesterday"),
    ],
)
def test_format_time(value, expected):
    assert format_time(value) == expected


@pytest.mark.parametrize(
    ("ms", "expected"),
    [
        (None, "-"),
        (0, "0ms"),
        (850, "850ms"),
        (42_000, "42s"),
        (185_000, "3m 05s"),
        (7_620_000, "2h 07m"),
        (273_600_000, "3d 04h"),
    ],
)
def test_format_elapsed(ms, expected):
    assert format_elapsed(ms) == expected


def test_json_output_is_pretty_with_a_stable_key_order():
    text = dump_json({"b": 1, "a": {"d": "Esperando hueco · x", "c": None}})
    assert text == '{\n  "a": {\n    "c": null,\n    "d": "Esperando hueco · x"\n  },\n  "b": 1\n}'


# -- limits and slots -------------------------------------------------------------------------------


def test_limits_list_shows_an_overridden_capacity_next_to_the_config():
    text = render_limits(
        {
            "limits": [
                limit(),
                limit(
                    name="partner-api",
                    capacity=5,
                    effective_capacity=25,
                    capacity_override=25,
                    max_hold="10m",
                    effective_max_hold="2h",
                    max_hold_override="2h",
                    busy=0,
                    reserved=0,
                    waiting=0,
                ),
            ]
        }
    )
    header, first, second = text.splitlines()
    assert columns(header) == ["NAME", "CAPACITY", "BUSY", "RESERVED", "WAITING", "MAX", "HOLD"]
    assert columns(first) == ["calls", "20", "3", "1", "12", "45m"]
    assert "25 (config 5)" in second and "2h (config 10m)" in second
    assert header.index("BUSY") + len("BUSY") == first.index("3") + 1  # numbers line up under their header


def test_no_limits_says_where_to_declare_them():
    assert "duro.config.py" in render_limits({"limits": []})


def test_slots_show_held_busy_first_then_the_queue_in_order_with_waiting_time():
    answer = {
        "limit": limit(),
        "slots": [
            slot("waiting", 7, position=2, waited_ms=65_000, timeout_at=T0),
            slot("reserved", 5, held_since=T0, reserved_until=T0),
            slot("busy", 1, held_since=T0, expires_at="2026-11-30T08:11:08+00:00"),
            slot("waiting", 6, position=1, waited_ms=125_000),
        ],
    }
    lines = render_slots(answer).splitlines()
    assert lines[0] == "calls: capacity 20, busy 3, reserved 1, waiting 12, max hold 45m"
    held = lines.index("held (2)")
    assert columns(lines[held + 1]) == ["SLOT", "STATE", "RUN", "LABEL", "SINCE", "UNTIL"]
    assert columns(lines[held + 2])[:4] == ["calls:1", "busy", "run-1", "label-1"]
    assert lines[held + 2].endswith("2026-11-30 08:11:08")
    assert columns(lines[held + 3])[:2] == ["calls:5", "reserved"]
    queue = lines.index("queue (2)")
    assert columns(lines[queue + 1]) == ["POS", "SLOT", "RUN", "LABEL", "WAITING", "TIMES", "OUT"]
    assert columns(lines[queue + 2])[:6] == ["1", "calls:6", "run-6", "label-6", "2m", "05s"]
    assert columns(lines[queue + 3])[:6] == ["2", "calls:7", "run-7", "label-7", "1m", "05s"]


def test_slots_of_an_idle_limit():
    text = render_slots({"limit": limit(busy=0, reserved=0, waiting=0), "slots": []})
    assert "held: none" in text and "queue: empty" in text


def test_long_labels_are_cut():
    text = render_slots({"limit": limit(), "slots": [slot("busy", 1, label="x" * 100)]})
    assert "x" * 31 + "…" in text and "x" * 33 not in text


def test_capacity_and_max_hold_changes_and_resets():
    assert (
        render_capacity({"limit": limit(effective_capacity=25, capacity_override=25)})
        == "calls: capacity 25 (config 20); waiting runs get any new slot now"
    )
    assert render_capacity({"limit": limit()}) == "calls: capacity reset to the config (20)"
    assert render_max_hold({"limit": limit(effective_max_hold="2h", max_hold_override="2h")}).startswith(
        "calls: max hold 2h (config 45m)"
    )
    assert render_max_hold({"limit": limit()}).startswith("calls: max hold reset to the config (45m)")


def test_release_says_whether_a_slot_was_freed():
    assert render_released({"released": True, "slot_id": "calls:1"}).startswith("released slot calls:1")
    assert "nothing changed" in render_released({"released": False, "slot_id": "calls:1"})


# -- runs -------------------------------------------------------------------------------------------


def run(**over):
    base = {
        "id": "r1",
        "workflow": "place_call",
        "version": "1",
        "namespace": "default",
        "status": "running",
        "input": {"call_id": "a"},
        "output": None,
        "error": None,
        "tags": ["concurrency:tenant-a"],
        "parent_id": None,
        "created_at": T0,
        "updated_at": T0,
        "ended_at": None,
    }
    return {**base, **over}


def test_cancel_says_nothing_was_cancelled_when_the_run_had_already_ended():
    cancelled = {"run": {"id": "r1", "status": "cancelled"}}
    assert render_cancelled(cancelled, "running") == "cancelled run r1"
    assert render_cancelled({"run": {"id": "r1", "status": "suspended"}}, "suspended") == (
        "cancelling run r1: its code is told now, and the run ends cancelled when it has finished"
    )
    assert render_cancelled(cancelled, "cancelled") == "run r1 is cancelled: nothing to cancel"
    assert render_cancelled({"run": {"id": "r1", "status": "completed"}}, "completed") == (
        "run r1 is completed: nothing to cancel"
    )


def test_runs_list_is_a_table_with_the_next_page_hint():
    text = render_runs({"runs": [run(), run(id="r0", status="completed")], "next_cursor": "abc"})
    lines = text.splitlines()
    assert columns(lines[0]) == ["ID", "WORKFLOW", "STATUS", "CREATED", "(UTC)"]
    assert columns(lines[1]) == ["r1", "place_call", "running", "2026-11-30", "07:26:08"]
    assert columns(lines[2])[2] == "completed"
    assert lines[-1] == "more: add --cursor abc"
    assert render_runs({"runs": [], "next_cursor": None}) == "no runs"


def test_runs_show_has_a_header_and_the_steps_with_hook_steps():
    steps = [
        {
            "seq": 0,
            "name": "dial",
            "kind": "step",
            "status": "completed",
            "started_at": T0,
            "ended_at": T0,
            "wake_at": None,
            "result": "prov-a",
            "error": None,
            "detail": None,
        },
        {
            "seq": 1,
            "name": "Esperando hueco · calls",
            "kind": "hook",
            "status": "waiting",
            "started_at": T0,
            "ended_at": None,
            "wake_at": None,
            "result": None,
            "error": None,
            "detail": {"limit": "calls", "slot_id": "calls:9"},
        },
    ]
    lines = render_run({"run": run(), "steps": steps}).splitlines()
    assert lines[0] == "run r1 · place_call v1"
    assert "  status   running" in lines and "  tags     concurrency:tenant-a" in lines
    assert '  input    {"call_id": "a"}' in lines
    header = next(i for i, line in enumerate(lines) if line.startswith("SEQ"))
    assert columns(lines[header + 1])[:4] == ["0", "step", "dial", "completed"]
    assert lines[header + 1].endswith('"prov-a"')
    hook = lines[header + 2]
    assert "Esperando hueco · calls" in hook and "hook" in hook and "waiting" in hook
    assert hook.endswith("limit calls, slot calls:9")


def test_runs_show_of_a_failed_run_shows_the_error():
    failed = run(status="failed", error={"type": "builtins.ValueError", "message": "no", "traceback": "..."})
    text = render_run({"run": failed, "steps": []})
    assert "  error    ValueError: no" in text and "no steps yet" in text


def test_start_says_whether_the_run_is_new():
    assert render_started({"run": run(status="pending"), "created": True}).startswith(
        "started run r1 of place_call (pending)"
    )
    assert "already exists (running): nothing started" in render_started({"run": run(), "created": False})


# -- refusals -----------------------------------------------------------------------------------------


def test_a_quota_refusal_names_key_limit_and_active():
    body = {
        "error": "concurrency_limit",
        "message": "…",
        "workflow": "chat_turn",
        "key": "tenant:acme",
        "limit": 8,
        "active": 8,
    }
    text = describe_api_error(ApiError(429, "concurrency_limit", "…", body), TARGET)
    assert text.startswith("refused: workflow 'chat_turn' is at its concurrency limit")
    assert "key 'tenant:acme', limit 8, active 8" in text
    assert text.endswith("retry when one of those runs ends")
    timed = describe_api_error(ApiError(429, "concurrency_limit", "…", {**body, "retry_after": 1}), TARGET)
    assert timed.endswith("active 8): retry in about 1 s")  # no end is known: only when to try


def test_other_refusals_pass_the_servers_message_and_hint_at_tokens_and_load_errors():
    assert describe_api_error(ApiError(404, "not_found", "no run 'x'"), TARGET) == "no run 'x'"
    missing = {
        "error": "not_found",
        "message": "run 'r\x1b1' does not exist; … GET /api/runs",
        "run_id": "r\x1b1",
    }
    text = describe_api_error(ApiError(404, "not_found", missing["message"], missing), TARGET)
    assert text.startswith("run 'r") and "\x1b" not in text and "`duro runs list`" in text
    assert "the dev server at http://127.0.0.1:8787" in text and "GET /api" not in text
    ended = {
        "error": "conflict",
        "message": "cannot send signal 'go' to run 'r1': the run has ended (failed)",
    }
    assert describe_api_error(ApiError(409, "conflict", ended["message"], ended), TARGET) == ended["message"]
    assert (
        describe_api_error(ApiError(401, "unauthorized", "token needed"), TARGET)
        == "the dev server at http://127.0.0.1:8787 needs a token: set DURO_TOKEN to it"
    )
    text = describe_api_error(ApiError(503, "unavailable", "SyntaxError in workflows/a.py"), TARGET)
    assert "cannot serve the project" in text and "SyntaxError" in text


# -- arguments ------------------------------------------------------------------------------------------


def test_json_arguments_decode():
    assert parse_json_argument("--input", '{"a": [1, null]}', "e.g.") == {"a": [1, None]}
    assert parse_json_argument("--input", '"hi"', "e.g.") == "hi"


def test_invalid_json_says_what_is_wrong_with_an_example():
    with pytest.raises(CliFailure) as caught:
        parse_json_argument("--input", "{call_id: a}", '--input \'{"call_id": "a"}\'')
    assert caught.value.exit_code == 2
    assert str(caught.value).startswith(
        "--input is not valid JSON (Expecting property name enclosed in double quotes at line 1, column 2): "
        'e.g. --input \'{"call_id": "a"}\''
    )


def test_a_bare_word_is_shown_how_to_quote():
    with pytest.raises(CliFailure) as caught:
        parse_json_argument("--payload", "approved", "e.g.")
    assert "to send the text approved, quote it as JSON: --payload '\"approved\"'" in str(caught.value)


def test_capacity_and_max_hold_arguments():
    assert parse_capacity("25") == 25 and parse_capacity("reset") is None and parse_capacity("RESET") is None
    assert (
        parse_max_hold("2h") == "2h"
        and parse_max_hold("reset") is None
        and parse_max_hold("1h30m") == "1h30m"
    )
    with pytest.raises(CliFailure) as caught:
        parse_capacity("lots")
    assert caught.value.exit_code == 2 and "whole number" in str(caught.value)


@pytest.mark.parametrize("text", ["lots", "0", "100001", "-3", "2.5"])
def test_a_capacity_out_of_range_names_the_range_the_limit_and_reset(text):
    with pytest.raises(CliFailure) as caught:
        parse_capacity(text, "partner-api")
    assert caught.value.exit_code == 2
    assert str(caught.value) == (
        f"capacity must be a whole number from 1 to 100000, or reset, not {text!r}: "
        f"e.g. duro limits capacity partner-api 25, or duro limits capacity partner-api reset"
    )


@pytest.mark.parametrize("text", ["forever", "2H", "5000", "2 h", "1.5.2h"])
def test_a_max_hold_that_is_not_a_duration_says_what_the_cli_accepts(text):
    with pytest.raises(CliFailure) as caught:
        parse_max_hold(text, "partner-api")
    message = str(caught.value)
    assert caught.value.exit_code == 2 and message.startswith("max hold must be a duration such as 90s, 45m")
    assert "or reset" in message and "duro limits max-hold partner-api 2h" in message
    # words for Python callers or JSON bodies have no place in the CLI
    for python_word in ("timedelta", "int of milliseconds", "null"):
        assert python_word not in message


def test_no_example_names_a_limit_or_workflow_the_project_may_not_have():
    with pytest.raises(CliFailure) as caught:
        parse_capacity("lots", "my-limit")
    assert "voice-calls" not in str(caught.value) and "my-limit" in str(caught.value)
    with pytest.raises(CliFailure) as caught:
        parse_json_argument("--input", "{bad", INPUT_EXAMPLE)
    assert "call_id" not in str(caught.value) and "voice" not in str(caught.value)


# -- bad arguments are refused before any server is looked for (exit 2) ---------------------------


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["start", "place_call", "--input", "{bad"], "error: --input is not valid JSON"),
        (["signal", "r1", "go", "--payload", "yes please"], "error: --payload is not valid JSON"),
        (["start", "place_call", "--concurrency-key", "t:a"], "--concurrency-key and --concurrency-limit go"),
        (["limits", "capacity", "calls", "lots"], "error: capacity must be a whole number"),
        (
            ["limits", "capacity", "calls", "0"],
            "error: capacity must be a whole number from 1 to 100000, or reset",
        ),
        (["limits", "max-hold", "calls", "forever"], "error: max hold must be a duration such as 90s"),
        (
            ["limits", "release", "calls:1"],
            "error: add --yes to release slot calls:1 (it frees the slot for the next run in the queue)",
        ),
        (["runs", "list", "--status", "sleeping"], "Invalid value for '--status'"),
        (["runs", "list", "--limit", "0"], "Invalid value for '--limit'"),
        (["runs", "show"], "Missing argument 'RUN_ID'"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(tmp_path, args, expected):
    result = CliRunner().invoke(main, [*args, "--project", str(tmp_path)])
    assert result.exit_code == 2, result.output
    assert expected in result.stderr and result.stdout == ""


def test_the_json_example_is_shown_on_stderr(tmp_path):
    result = CliRunner().invoke(main, ["start", "place_call", "--input", "{bad", "--project", str(tmp_path)])
    assert (
        'e.g. --input \'{"id": "A-1", "qty": 2}\' (an object), --input \'"acme"\' (a string)' in result.stderr
    )
    json.loads('{"id": "A-1", "qty": 2}')  # the examples themselves are valid JSON
    json.loads('"acme"')
