"""Commands that talk to a running installation over the HTTP API: start, runs, signal, limits.

Thin: each command makes one call through :class:`~duro_devserver.client.DuroClient` and prints the
answer, as JSON with ``--json`` or as a table for people. Exit codes: 0 done, 1 the server refused
(or failed), 2 a bad argument, 3 no server to talk to.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click

from duro import DuroError
from duro.tooling import ENDED, RETRYABLE, RUN_STATES, UNFINISHED, duration_ms

from ._extras import dev_extra

if TYPE_CHECKING:  # imported by the commands themselves: the client needs the dev extra (httpx)
    from .client import ApiError, DuroClient, ServerUnreachable, Target

EXIT_REFUSED = 1
EXIT_USAGE = 2
EXIT_UNREACHABLE = 3

INPUT_EXAMPLE = """--input '{"id": "A-1", "qty": 2}' (an object), --input '"acme"' (a string)"""
PAYLOAD_EXAMPLE = """--payload '{"approved": true}'"""


class CliFailure(click.ClickException):
    """A command failed: printed to stderr as ``error: <message>``, then the CLI exits with ``exit_code``."""

    def __init__(self, message: str, exit_code: int) -> None:
        super().__init__(message)
        self.exit_code = exit_code  # type: ignore[misc]  # click reads it per instance, types it a ClassVar

    def show(self, file: IO[Any] | None = None) -> None:
        """Print ``error: <message>`` to stderr."""
        click.echo(f"error: {self.format_message()}", err=True, file=file)


# -- arguments --------------------------------------------------------------------------------------


def parse_json_argument(option: str, text: str, example: str) -> Any:
    """Decode the JSON given to ``option``; else a :class:`CliFailure` (exit 2) says what is wrong and shows
    ``example``."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        where = f"{err.msg} at line {err.lineno}, column {err.colno}"
        message = f"{option} is not valid JSON ({where}): e.g. {example}"
        stripped = text.strip()
        if stripped and stripped[0] not in '{["-0123456789' and "\n" not in stripped:
            message += f"; to send the text {stripped}, quote it as JSON: {option} '{json.dumps(stripped)}'"
        raise CliFailure(message, EXIT_USAGE) from None


MAX_CAPACITY = 100_000
MAX_HOLD_HINT = (
    "a duration such as 90s, 45m, 2h or 1h30m (units ms, s, m, h, d in lowercase, no spaces; at most 30d)"
)


def parse_capacity(text: str, limit: str = "LIMIT") -> int | None:
    """``N`` (1..100000) or ``reset`` (``None``) for ``duro limits capacity``."""
    if text.strip().lower() == "reset":
        return None
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or not 1 <= value <= MAX_CAPACITY:
        raise CliFailure(
            f"capacity must be a whole number from 1 to {MAX_CAPACITY}, or reset, not {text!r}: "
            f"e.g. duro limits capacity {limit} 25, or duro limits capacity {limit} reset",
            EXIT_USAGE,
        ) from None
    return value


def parse_max_hold(text: str, limit: str = "LIMIT") -> str | None:
    """``DURATION`` or ``reset`` (``None``) for ``duro limits max-hold``. The spelling is checked here;
    the server judges the range (more than 0, at most 30 days)."""
    if text.strip().lower() == "reset":
        return None
    try:
        duration_ms(text.strip(), "max hold")
    except DuroError:
        raise CliFailure(
            f"max hold must be {MAX_HOLD_HINT}, or reset, not {text!r}: "
            f"e.g. duro limits max-hold {limit} 2h, or duro limits max-hold {limit} reset",
            EXIT_USAGE,
        ) from None
    return text.strip()


# -- formatting -------------------------------------------------------------------------------------


def dump_json(answer: Any) -> str:
    """The API's answer as pretty JSON with a stable key order (what ``--json`` prints)."""
    return json.dumps(answer, indent=2, sort_keys=True, ensure_ascii=False)


def clean(value: Any, width: int | None = None) -> str:
    """One table cell: ``-`` for None, control characters escaped (labels come from outside), cut to
    ``width``."""
    if value is None:
        return "-"
    text = value if isinstance(value, str) else str(value)
    text = "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return text


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], right: Sequence[int] = ()) -> str:
    """Aligned columns separated by two spaces; column indexes in ``right`` are right-aligned."""
    cells = [[clean(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def line(values: Sequence[str]) -> str:
        pairs = enumerate(zip(values, widths, strict=True))
        parts = [v.rjust(w) if i in right else v.ljust(w) for i, (v, w) in pairs]
        return "  ".join(parts).rstrip()

    return "\n".join([line(headers), *(line(r) for r in cells)])


def format_time(value: str | None) -> str:
    """An API time as ``2026-11-30 07:26:08`` (UTC, whole seconds); ``-`` for None."""
    if not value:
        return "-"
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return clean(value)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S")


def format_elapsed(ms: int | float | None) -> str:
    """Elapsed milliseconds for people: ``850ms``, ``42s``, ``3m 05s``, ``2h 07m``, ``3d 04h``."""
    if ms is None:
        return "-"
    ms = int(ms)
    if ms < 1000:
        return f"{ms}ms"
    seconds = ms // 1000
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours:02d}h"


def _compact(value: Any, width: int = 60) -> str:
    return clean(json.dumps(value, ensure_ascii=False, sort_keys=True), width)


def capacity_cell(limit: dict[str, Any]) -> str:
    """``25 (config 20)`` when the capacity is overridden, else ``20``."""
    effective = limit.get("effective_capacity", limit.get("capacity"))
    if limit.get("capacity_override") is not None:
        return f"{effective} (config {limit.get('capacity')})"
    return str(effective)


def max_hold_cell(limit: dict[str, Any]) -> str:
    """``2h (config 45m)`` when max hold is overridden, else ``45m``."""
    effective = limit.get("effective_max_hold", limit.get("max_hold"))
    if limit.get("max_hold_override") is not None:
        return f"{effective} (config {limit.get('max_hold')})"
    return str(effective)


def render_limits(answer: dict[str, Any]) -> str:
    """``duro limits list``: one line per limit."""
    limits = answer.get("limits", [])
    if not limits:
        return "no limits: declare them in duro.config.py (define_workspace(limits={...}))"
    rows = [
        [
            lim["name"],
            capacity_cell(lim),
            lim.get("busy"),
            lim.get("reserved"),
            lim.get("waiting"),
            max_hold_cell(lim),
        ]
        for lim in limits
    ]
    headers = ["NAME", "CAPACITY", "BUSY", "RESERVED", "WAITING", "MAX HOLD"]
    if any(lim.get("per_key") is not None for lim in limits):  # keyed limits: their capacity per key
        headers.insert(2, "PER KEY")
        for row, lim in zip(rows, limits, strict=True):
            row.insert(2, "-" if lim.get("per_key") is None else lim["per_key"])
        return table(headers, rows, right=(2, 3, 4, 5))
    return table(headers, rows, right=(2, 3, 4))


def limit_summary(limit: dict[str, Any]) -> str:
    """One line about a limit: capacity, counts and max hold."""
    return (
        f"{clean(limit.get('name'))}: capacity {capacity_cell(limit)}, busy {limit.get('busy')}, "
        f"reserved {limit.get('reserved')}, waiting {limit.get('waiting')}, "
        f"max hold {max_hold_cell(limit)}"
    )


def render_slots(answer: dict[str, Any]) -> str:
    """``duro limits slots``: the limit, its held slots (busy first), then its queue in order."""
    slots = answer.get("slots", [])
    held = [s for s in slots if s.get("state") != "waiting"]
    held.sort(key=lambda s: s.get("state") != "busy")
    queue = sorted((s for s in slots if s.get("state") == "waiting"), key=lambda s: s.get("position") or 0)
    out = [limit_summary(answer.get("limit", {})), ""]
    if held:
        rows = [
            [
                s.get("id"),
                s.get("state"),
                s.get("run_id"),
                clean(s.get("label"), 32),
                format_time(s.get("held_since")),
                format_time(s.get("expires_at") if s.get("state") == "busy" else s.get("reserved_until")),
            ]
            for s in held
        ]
        out += [f"held ({len(held)})", table(["SLOT", "STATE", "RUN", "LABEL", "SINCE", "UNTIL"], rows)]
    else:
        out.append("held: none")
    out.append("")
    if queue:
        rows = [
            [
                s.get("position"),
                s.get("id"),
                s.get("run_id"),
                clean(s.get("label"), 32),
                format_elapsed(s.get("waited_ms")),
                format_time(s.get("timeout_at")),
            ]
            for s in queue
        ]
        out += [
            f"queue ({len(queue)})",
            table(["POS", "SLOT", "RUN", "LABEL", "WAITING", "TIMES OUT"], rows, right=(0, 4)),
        ]
    else:
        out.append("queue: empty")
    return "\n".join(out)


def render_runs(answer: dict[str, Any]) -> str:
    """``duro runs list``: id, workflow, status, created; then how to get the next page."""
    runs = answer.get("runs", [])
    if not runs:
        return "no runs"
    rows = [[r.get("id"), r.get("workflow"), r.get("status"), format_time(r.get("created_at"))] for r in runs]
    text = table(["ID", "WORKFLOW", "STATUS", "CREATED (UTC)"], rows)
    if answer.get("next_cursor"):
        text += f"\nmore: add --cursor {answer['next_cursor']}"
    return text


def _error_text(error: Any) -> str:
    """``ValueError: ...``: the error type's own name, as Studio shows it (``--json`` keeps the path)."""
    if isinstance(error, dict):
        return f"{str(error.get('type')).rsplit('.', 1)[-1]}: {error.get('message')}"
    return str(error)


def _step_detail(step: dict[str, Any]) -> str:
    if step.get("error") is not None:
        return clean(_error_text(step["error"]), 80)
    if step.get("kind") == "hook":
        detail = step.get("detail") or {}
        parts = [
            f"limit {detail.get('limit')}" if detail.get("limit") else "",
            f"slot {detail.get('slot_id')}" if detail.get("slot_id") else "",
        ]
        return clean(", ".join(p for p in parts if p)) or "-"
    if step.get("status") == "waiting" and step.get("wake_at"):
        return f"until {format_time(step['wake_at'])}"
    if step.get("status") == "waiting":
        return "-"
    return _compact(step.get("result"))


def render_run(answer: dict[str, Any]) -> str:
    """``duro runs show``: the run's header, then its steps (hook steps included)."""
    run = answer.get("run", {})
    version = f" v{run['version']}" if run.get("version") else ""
    fields = [
        ("status", run.get("status")),
        ("created", format_time(run.get("created_at"))),
        ("updated", format_time(run.get("updated_at"))),
        ("ended", format_time(run.get("ended_at"))),
        ("tags", ", ".join(run.get("tags") or []) or None),
        ("parent", run.get("parent_id")),
        ("attempt", run.get("attempt") if (run.get("attempt") or 1) > 1 else None),
        ("forked", "from {} at seq {}".format(*run["forked_from"]) if run.get("forked_from") else None),
        ("input", _compact(run.get("input"), 100)),
    ]
    if run.get("error") is not None:
        fields.append(("error", clean(_error_text(run["error"]), 200)))
    else:
        fields.append(("output", _compact(run.get("output"), 100)))
    lines = [f"run {clean(run.get('id'))} · {clean(run.get('workflow'))}{clean(version)}"]
    lines += [f"  {name:<8} {clean(value)}" for name, value in fields]
    steps = answer.get("steps", [])
    lines.append("")
    if not steps:
        lines.append("no steps yet")
    else:
        latest: dict[Any, int] = {}  # seq -> the last attempt that made the call there
        for s in steps:
            latest[s.get("seq")] = max(latest.get(s.get("seq"), 1), s.get("attempt") or 1)
        rows = [
            [
                s.get("seq"),
                s.get("kind"),
                clean(s.get("name"), 40)
                + (
                    f" (attempt {s.get('attempt')})" if (s.get("attempt") or 1) < latest[s.get("seq")] else ""
                ),
                s.get("status"),
                format_time(s.get("started_at")),
                format_time(s.get("ended_at")),
                _step_detail(s),
            ]
            for s in steps
        ]
        lines.append(
            table(["SEQ", "KIND", "NAME", "STATUS", "STARTED", "ENDED", "RESULT / DETAIL"], rows, right=(0,))
        )
    return "\n".join(lines)


def render_started(answer: dict[str, Any]) -> str:
    """``duro start``: the run id and status, or that the run already existed."""
    run = answer.get("run", {})
    rid, workflow, status = clean(run.get("id")), clean(run.get("workflow")), clean(run.get("status"))
    if answer.get("created", True):
        return f"started run {rid} of {workflow} ({status})\nfollow it with: duro runs show {rid}"
    return f"run {rid} of {workflow} already exists ({status}): nothing started"


def render_cancelled(answer: dict[str, Any], before: str | None = None) -> str:
    """``duro runs cancel``: the run's status afterwards; ``before``, its status before the cancel
    (a run that had already ended, cancelled included, had nothing to cancel)."""
    run = answer.get("run", {})
    rid, status = clean(run.get("id")), clean(run.get("status"))
    if before in ENDED or (status in ENDED and status != "cancelled"):
        return f"run {rid} is {status}: nothing to cancel"
    if status == "cancelled":
        return f"cancelled run {rid}"
    return f"cancelling run {rid}: its code is told now, and the run ends cancelled when it has finished"


def render_retried(answer: dict[str, Any]) -> str:
    """``duro runs retry RUN_ID...``: each run retried, pending again."""
    lines = []
    for run in answer.get("runs", []):
        rid = clean(run.get("id"))
        lines.append(
            f"retried run {rid} (attempt {run.get('attempt')}): it goes on from its failing call; "
            f"follow it with: duro runs show {rid}"
        )
    return "\n".join(lines)


def render_would_retry(answer: dict[str, Any]) -> str:
    """``duro runs retry RUN_ID... --dry-run``: which runs a retry would take, and which it would refuse."""
    lines = []
    for run in answer.get("runs", []):
        rid, status = clean(run.get("id")), clean(run.get("status"))
        if status in RETRYABLE:
            lines.append(f"would retry run {rid} ({status})")
        else:
            lines.append(f"would refuse run {rid}: it is {status} (a retry takes a failed or cancelled run)")
    return "\n".join(lines)


def render_forked(answer: dict[str, Any], original: str, from_seq: int) -> str:
    """``duro runs fork``: the new run."""
    rid = clean(answer.get("run", {}).get("id"))
    return (
        f"forked run {clean(original)} from seq {from_seq} as run {rid}\nfollow it with: duro runs show {rid}"
    )


def render_bulk(answer: dict[str, Any], verb: str) -> str:
    """``duro runs retry|cancel`` by filter: what it did (or, in a dry run, would do)."""
    report = answer.get("report", {})
    ids = [clean(run_id) for run_id in report.get("run_ids", [])]
    refused = report.get("refused", {})
    past = {"retry": "retried", "cancel": "cancelled"}.get(verb, verb)
    if report.get("dry_run"):
        head = f"would {verb} {len(ids):,} run(s)" + (":" if ids else " (no run matches the filter)")
    else:
        head = f"{past} {len(ids):,} run(s) ({len(refused):,} refused)"
    lines = [head, *(f"  {run_id}" for run_id in ids[:50])]
    if len(ids) > 50:
        lines.append(f"  ... and {len(ids) - 50:,} more (--json lists them all)")
    lines += [f"  refused {clean(run_id)}: {clean(why)}" for run_id, why in refused.items()]
    return "\n".join(lines)


def render_pruned(answer: dict[str, Any]) -> str:
    """``duro runs prune``: what went (or, in a dry run, would go)."""
    prune = answer.get("prune", {})
    verb = "would delete" if prune.get("dry_run") else "deleted"
    return (
        f"{verb} {prune.get('runs', 0):,} finished run(s) that ended before "
        f"{format_time(prune.get('before'))} UTC, with {prune.get('steps', 0):,} step(s) and "
        f"{prune.get('slots', 0):,} slot(s)"
    )


def render_released(answer: dict[str, Any]) -> str:
    """``duro limits release``: whether a slot was freed."""
    slot_id = clean(answer.get("slot_id"))
    if answer.get("released"):
        return f"released slot {slot_id}: it goes to the next run in the queue"
    return f"slot {slot_id} was not held (already released, or taken back by max hold): nothing changed"


def render_capacity(answer: dict[str, Any]) -> str:
    """``duro limits capacity``: the capacity now in effect."""
    limit = answer.get("limit", {})
    name = clean(limit.get("name"))
    if limit.get("capacity_override") is None:
        return f"{name}: capacity reset to the config ({limit.get('capacity')})"
    return f"{name}: capacity {capacity_cell(limit)}; waiting runs get any new slot now"


def render_key_capacity(answer: dict[str, Any]) -> str:
    """``duro limits capacity --key``: the key's capacity now in effect."""
    key = answer.get("key", {})
    name, which = clean(answer.get("limit")), clean(key.get("key"), 64)
    if not key.get("overridden"):
        return f"{name}, key {which}: capacity reset to the limit's per_key ({key.get('capacity')})"
    return f"{name}, key {which}: capacity {key.get('capacity')}; its waiting runs get any new slot now"


def render_keys(answer: dict[str, Any]) -> str:
    """``duro limits keys``: one line per key, busiest first."""
    keys = answer.get("keys", [])
    head = limit_summary(answer.get("limit", {}))
    if not keys:
        return f"{head}\n\nkeys: none busy, reserved or waiting"
    rows = [
        [
            clean(k.get("key"), 64),
            f"{k.get('capacity')}" + (" (override)" if k.get("overridden") else ""),
            k.get("busy"),
            k.get("reserved"),
            k.get("waiting"),
        ]
        for k in keys
    ]
    return f"{head}\n\n" + table(["KEY", "CAPACITY", "BUSY", "RESERVED", "WAITING"], rows, right=(2, 3, 4))


def render_max_hold(answer: dict[str, Any]) -> str:
    """``duro limits max-hold``: the max hold now in effect."""
    limit = answer.get("limit", {})
    name = clean(limit.get("name"))
    if limit.get("max_hold_override") is None:
        now = f"reset to the config ({clean(limit.get('max_hold'))})"
    else:
        now = clean(max_hold_cell(limit))
    return f"{name}: max hold {now}; it applies to slots granted from now on"


def describe_api_error(err: ApiError, target: Target) -> str:
    """What the CLI prints (after ``error: ``) when the server refused a request."""
    body = err.body if isinstance(err.body, dict) else {}
    if err.status == 429 or err.code == "concurrency_limit":
        retry = body.get("retry_after")
        known = isinstance(retry, int) and not isinstance(retry, bool)
        when = f"retry in about {retry} s" if known else "retry when one of those runs ends"
        return (
            f"refused: workflow '{clean(body.get('workflow'))}' is at its concurrency limit "
            f"(key '{clean(body.get('key'))}', limit {body.get('limit')}, active {body.get('active')}): "
            f"{when}"
        )
    if err.status == 404 and isinstance(body.get("run_id"), str):  # the server names GET /api/runs
        return (
            f"run '{clean(body['run_id'])}' does not exist on {target.description}: check the id, "
            f"or list runs with `duro runs list`"
        )
    if err.status == 401:
        if target.token is None:
            return f"{target.description} needs a token: {target.token_hint}"
        return f"{target.description} refused the token: {target.token_hint}"
    if err.status == 503 and "retry_after" in body:  # its database was busy or out of reach
        return f"{target.description} is up but its database did not answer in time: {clean(err.message)}"
    if err.status == 503 or err.code == "unavailable":
        return f"{target.description} is up but cannot serve the project: {clean(err.message)}"
    if err.status >= 500:
        return f"{target.description} failed ({err.status}): {clean(err.message)}"
    return clean(err.message)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def describe_unreachable(err: ServerUnreachable, target: Target) -> str:
    """What the CLI prints (after ``error: ``) when the server does not answer."""
    message = f"{target.description} is not answering ({err.reason}): {target.unreachable_hint}"
    if target.pid is not None and target.server_file is not None and not _pid_alive(target.pid):
        message += f" ({target.server_file} names pid {target.pid}, which is not running)"
    return message


# -- plumbing shared by every command -----------------------------------------------------------------


class Call:
    """What a command gets: the installation's client (resolved on first use, so that arguments are
    checked first), and how to print the answer."""

    def __init__(self, project: Path, agent: str | None, as_json: bool) -> None:
        self.project = project
        self.agent = agent
        self.as_json = as_json
        self._target: Target | None = None
        self._client: DuroClient | None = None

    @property
    def target(self) -> Target:
        """The installation to talk to (raises :class:`TargetError` when there is none)."""
        if self._target is None:
            from .client import resolve_target

            self._target = resolve_target(self.project, self.agent, os.environ)
        return self._target

    @property
    def client(self) -> DuroClient:
        """The client of :attr:`target`."""
        if self._client is None:
            from .client import DuroClient

            self._client = DuroClient(self.target.url, self.target.token)
        return self._client

    def close(self) -> None:
        """Close the client, if one was made."""
        if self._client is not None:
            self._client.close()

    def emit(self, answer: dict[str, Any], render: Callable[[dict[str, Any]], str]) -> None:
        """Print ``answer``: as JSON with ``--json``, else rendered for people."""
        click.echo(dump_json(answer) if self.as_json else render(answer))


def api_command(fn: Callable[..., None]) -> Callable[..., None]:
    """Give a command ``--agent``, ``--project`` and ``--json``, call it with a :class:`Call`, and turn
    the client's errors into exit codes (1 refused, 3 unreachable; a bad target is 2 or 3)."""

    @click.option("--json", "as_json", is_flag=True, help="Print the API's JSON answer, and nothing else.")
    @click.option(
        "--project",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("."),
        metavar="DIR",
        show_default=True,
        help="The project whose dev server to use (its .duro/server.json).",
    )
    @click.option(
        "--agent",
        metavar="ID",
        default=None,
        help="Talk to this installation instead: a URL, or a name from ~/.config/duro/agents.toml.",
    )
    @functools.wraps(fn)
    def command(agent: str | None, project: Path, as_json: bool, **kwargs: Any) -> None:
        with dev_extra():
            from .client import ApiError, ServerUnreachable, TargetError
        call = Call(project, agent, as_json)
        try:
            fn(call, **kwargs)
        except TargetError as err:
            raise CliFailure(str(err), err.exit_code) from None
        except ServerUnreachable as err:
            raise CliFailure(describe_unreachable(err, call.target), EXIT_UNREACHABLE) from None
        except ApiError as err:
            if as_json and isinstance(err.body, dict):
                click.echo(dump_json(err.body))
            raise CliFailure(describe_api_error(err, call.target), EXIT_REFUSED) from None
        finally:
            call.close()

    return command


# -- the commands -------------------------------------------------------------------------------------


@click.command("start")
@click.argument("workflow")
@click.option(
    "--input", "input_json", metavar="JSON", default=None, help="The run's input as JSON (default null)."
)
@click.option(
    "--run-id",
    metavar="ID",
    default=None,
    help="The run's id; an id that a run of this workflow has returns that run and starts nothing; "
    "another workflow's is refused (409).",
)
@click.option(
    "--concurrency-key",
    metavar="KEY",
    default=None,
    help="Quota key for this start (replaces the workflow's quota); needs --concurrency-limit.",
)
@click.option(
    "--concurrency-limit",
    metavar="N",
    type=int,
    default=None,
    help="How many counted runs KEY may have at once; needs --concurrency-key.",
)
@click.option(
    "--version", "version", metavar="V", default=None, help="A registered version (default: the newest)."
)
@api_command
def start_command(
    call: Call,
    workflow: str,
    input_json: str | None,
    run_id: str | None,
    concurrency_key: str | None,
    concurrency_limit: int | None,
    version: str | None,
) -> None:
    """Start a run of WORKFLOW and print its id (exit 1 if a quota refuses it)."""
    inp = None if input_json is None else parse_json_argument("--input", input_json, INPUT_EXAMPLE)
    concurrency = None
    if (concurrency_key is None) != (concurrency_limit is None):
        raise CliFailure(
            "--concurrency-key and --concurrency-limit go together: e.g. "
            "--concurrency-key tenant:acme --concurrency-limit 3",
            EXIT_USAGE,
        )
    if concurrency_key is not None:
        concurrency = {"key": concurrency_key, "limit": concurrency_limit}
    call.emit(
        call.client.start_run(workflow, inp, run_id=run_id, concurrency=concurrency, version=version),
        render_started,
    )


@click.group("runs")
def runs_group() -> None:
    """List, show, retry, fork, cancel and prune runs."""


@runs_group.command("list")
@click.option("--workflow", metavar="NAME", default=None, help="Only runs of this workflow.")
@click.option(
    "--status",
    "statuses",
    multiple=True,
    type=click.Choice(RUN_STATES, case_sensitive=False),
    help="Only runs in this status (repeat for several).",
)
@click.option("--tag", default=None, help="Only runs with this tag, e.g. concurrency:tenant:acme.")
@click.option(
    "--limit", type=click.IntRange(1, 500), default=None, help="At most this many runs (default 50)."
)
@click.option("--cursor", default=None, help="The next page: the cursor printed by the previous page.")
@click.option(
    "--all", "every", is_flag=True, help="Every run that matches, a page at a time (--limit a page)."
)
@api_command
def runs_list(
    call: Call,
    workflow: str | None,
    statuses: tuple[str, ...],
    tag: str | None,
    limit: int | None,
    cursor: str | None,
    every: bool,
) -> None:
    """List runs, newest first."""
    status = [s.lower() for s in statuses]
    answer = call.client.list_runs(workflow=workflow, status=status, tag=tag, limit=limit, cursor=cursor)
    if not every:
        call.emit(answer, render_runs)
        return
    runs = list(answer.get("runs", []))
    while answer.get("next_cursor"):  # a keyset cursor: runs started meanwhile never shift a page
        answer = call.client.list_runs(
            workflow=workflow, status=status, tag=tag, limit=limit, cursor=answer["next_cursor"]
        )
        runs += answer.get("runs", [])
    call.emit({"runs": runs, "next_cursor": None}, render_runs)


@runs_group.command("show")
@click.argument("run_id")
@api_command
def runs_show(call: Call, run_id: str) -> None:
    """Show a run and all its steps (a run waiting for a slot shows a hook step)."""
    call.emit(call.client.get_run_whole(run_id), render_run)


def _filters(fn: Callable[..., None]) -> Callable[..., None]:
    """The options of a bulk ``runs retry`` / ``runs cancel``: a filter, --dry-run and --yes."""
    for option in reversed(
        [
            click.option("--workflow", metavar="NAME", default=None, help="Only runs of this workflow."),
            click.option(
                "--since",
                metavar="DURATION",
                default=None,
                help="Only runs that ended (retry) or were created (cancel) this long ago or later, e.g. 2h.",
            ),
            click.option("--until", metavar="DURATION", default=None, help="... and before this long ago."),
            click.option(
                "--limit",
                type=click.IntRange(1, 100_000),
                default=1000,
                show_default=True,
                help="At most this many runs.",
            ),
            click.option("--dry-run", is_flag=True, help="List the runs it would act on; change nothing."),
            click.option("--yes", is_flag=True, help="Act on the runs a filter matches without asking."),
        ]
    ):
        fn = option(fn)
    return fn


def _check_duration(option: str, value: str, examples: str = "2h, 30m or 7d") -> None:
    """A duration option the CLI passes on as written: a usage error (exit 2) naming the spelling
    it takes when duro cannot read it."""
    try:
        duration_ms(value.strip(), option)
    except DuroError:
        raise CliFailure(
            f"{option} must be a duration such as {examples} (units ms, s, m, h, d in lowercase, "
            f"no spaces), not {value!r}",
            EXIT_USAGE,
        ) from None


def _check_durations(**given: str | None) -> None:
    for name, value in given.items():
        if value is not None:
            _check_duration(f"--{name}", value)


def _bulk(call: Call, action: str, noun: str, dry_run: bool, yes: bool, **body: Any) -> None:
    """A bulk action by filter: the runs it matches counted first (a dry run), then, asked (or
    --yes), acted on."""
    would = call.client.bulk_runs(action, dry_run=True, **body)
    count = len(would.get("report", {}).get("run_ids", []))
    if dry_run or count == 0:
        call.emit(would, lambda answer: render_bulk(answer, noun))
        return
    if not yes and not click.confirm(f"{noun} {count:,} run(s)?", default=False, err=True):
        raise CliFailure(
            f"nothing done: {noun} the {count:,} run(s) with --yes, or narrow the filter", EXIT_REFUSED
        )
    call.emit(call.client.bulk_runs(action, dry_run=False, **body), lambda answer: render_bulk(answer, noun))


@runs_group.command("retry")
@click.argument("run_ids", nargs=-1)
@click.option(
    "--status",
    type=click.Choice([*RETRYABLE, "any"], case_sensitive=False),
    default="failed",
    show_default=True,
    help="With a filter: runs that ended this way (any: failed or cancelled).",
)
@click.option("--error-type", metavar="NAME", default=None, help="Only runs whose error is of this class.")
@click.option("--version", metavar="VERSION", default=None, help="Move each run to this registered version.")
@_filters
@api_command
def runs_retry(
    call: Call,
    run_ids: tuple[str, ...],
    status: str,
    error_type: str | None,
    version: str | None,
    workflow: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    dry_run: bool,
    yes: bool,
) -> None:
    """Retry failed or cancelled runs from the call that failed: RUN_ID..., or every run a filter
    matches (--workflow, --status, --since, --until, --error-type; counted and confirmed first).
    Calls before the failing one are read back from the run's history, never executed again."""
    _check_durations(since=since, until=until)
    if run_ids:
        if workflow or since or until or error_type or status.lower() != "failed":
            raise CliFailure("give run ids or a filter (--workflow, --since, ...), not both", EXIT_USAGE)
        if dry_run:
            runs = [call.client.get_run(run_id)["run"] for run_id in run_ids]
            call.emit({"runs": runs}, render_would_retry)
            return
        retried = [call.client.retry_run(run_id, version)["run"] for run_id in run_ids]
        call.emit({"runs": retried}, render_retried)
        return
    _bulk(
        call,
        "retry",
        "retry",
        dry_run,
        yes,
        workflow=workflow,
        status=None if status.lower() == "any" else status.lower(),
        since=since,
        until=until,
        error_type=error_type,
        limit=limit,
        version=version,
    )


@runs_group.command("fork")
@click.argument("run_id")
@click.option("--from-seq", type=click.IntRange(0), required=True, help="The first call to run again.")
@click.option(
    "--run-id", "new_run_id", metavar="ID", default=None, help="The new run's id (default: a new one)."
)
@click.option("--version", metavar="VERSION", default=None, help="Run the fork on this registered version.")
@api_command
def runs_fork(call: Call, run_id: str, from_seq: int, new_run_id: str | None, version: str | None) -> None:
    """Start a new run of an ended run's workflow and input from a copy of its calls before --from-seq."""
    call.emit(
        call.client.fork_run(run_id, from_seq, new_run_id, version),
        lambda a: render_forked(a, run_id, from_seq),
    )


@runs_group.command("cancel")
@click.argument("run_ids", nargs=-1)
@click.option(
    "--status",
    type=click.Choice(UNFINISHED, case_sensitive=False),
    default=None,
    help="With a filter: only runs in this status (default: every unfinished run).",
)
@_filters
@api_command
def runs_cancel(
    call: Call,
    run_ids: tuple[str, ...],
    status: str | None,
    workflow: str | None,
    since: str | None,
    until: str | None,
    limit: int,
    dry_run: bool,
    yes: bool,
) -> None:
    """Cancel runs (and their unfinished children): RUN_ID..., or every unfinished run a filter matches
    (counted and confirmed first). A run that has ended is left as it is."""
    _check_durations(since=since, until=until)
    if run_ids:
        if workflow or since or until or status or dry_run:
            raise CliFailure("give run ids or a filter (--workflow, --since, ...), not both", EXIT_USAGE)
        for run_id in run_ids:
            before = call.client.get_run(run_id)["run"].get("status")
            call.emit(call.client.cancel_run(run_id), functools.partial(render_cancelled, before=before))
        return
    if not (workflow or since or until or status):
        raise CliFailure(
            "give run ids, or a filter (--workflow, --status, --since, --until) to cancel every run it matches",
            EXIT_USAGE,
        )
    _bulk(
        call,
        "cancel",
        "cancel",
        dry_run,
        yes,
        workflow=workflow,
        status=None if status is None else status.lower(),
        since=since,
        until=until,
        limit=limit,
    )


@runs_group.command("prune")
@click.option(
    "--older-than",
    metavar="DURATION",
    required=True,
    help="Delete finished runs that ended more than this long ago, e.g. 30d.",
)
@click.option("--dry-run", is_flag=True, help="Count what would be deleted; delete nothing.")
@click.option(
    "--database-url",
    metavar="URL",
    default=None,
    help="Prune this database directly instead of asking a running installation.",
)
@click.option(
    "--namespace", default="default", show_default=True, help="With --database-url: the namespace to prune."
)
@api_command
def runs_prune(call: Call, older_than: str, dry_run: bool, database_url: str | None, namespace: str) -> None:
    """Delete finished runs (completed, failed, cancelled) that ended more than --older-than ago, with
    their steps, signals and ended slots. Never an unfinished run, nor a finished child whose parent
    is unfinished. Say --dry-run first to see how many would go."""
    _check_duration("--older-than", older_than, "30d, 12h or 90m")
    if database_url is None:
        call.emit(call.client.prune_runs(older_than.strip(), dry_run), render_pruned)
        return
    try:
        report = _prune_directly(database_url, namespace, older_than.strip(), dry_run)
    except DuroError as err:
        raise CliFailure(str(err), EXIT_USAGE) from None
    call.emit({"prune": {**report, "before": report["before"].isoformat()}}, render_pruned)


def _prune_directly(database_url: str, namespace: str, older_than: str, dry_run: bool) -> dict[str, Any]:
    """``duro runs prune --database-url``: the prune through a client engine on that database."""
    import asyncio
    import dataclasses

    from duro import Engine
    from duro.store import SqlStore

    from .cli_server import open_store

    open_store(database_url)  # a database that cannot be used: an error that names it, no traceback
    store = SqlStore(database_url)
    try:
        engine = Engine(store=store, namespace=namespace)
        return dataclasses.asdict(asyncio.run(engine.prune(older_than, dry_run=dry_run)))
    finally:
        store.close()


@click.command("signal")
@click.argument("run_id")
@click.argument("name")
@click.option("--payload", "payload_json", metavar="JSON", default=None, help="The signal's payload as JSON.")
@api_command
def signal_command(call: Call, run_id: str, name: str, payload_json: str | None) -> None:
    """Send the signal NAME to a run (its wait_for_signal(NAME) returns the payload)."""
    payload = None
    if payload_json is not None:
        payload = parse_json_argument("--payload", payload_json, PAYLOAD_EXAMPLE)
    answer = call.client.signal(run_id, name, payload)
    call.emit(answer, lambda _: f"sent signal {clean(name)} to run {clean(run_id)}")


@click.group("limits")
def limits_group() -> None:
    """See limits and their slots; release a slot; override capacity and max hold."""


@limits_group.command("list")
@api_command
def limits_list(call: Call) -> None:
    """Each limit: capacity, busy, reserved and waiting counts, max hold."""
    call.emit(call.client.limits(), render_limits)


@limits_group.command("slots")
@click.argument("limit")
@click.option("--key", default=None, help="A keyed limit: this key's slots alone.")
@api_command
def limits_slots(call: Call, limit: str, key: str | None) -> None:
    """A limit's slots: held ones first, then the queue in order (every page of a long queue)."""
    answer = call.client.slots(limit, key)
    slots = list(answer.get("slots", []))
    while answer.get("next_cursor"):
        answer = call.client.slots(limit, key, cursor=answer["next_cursor"])
        slots += answer.get("slots", [])
    call.emit({**answer, "slots": slots, "next_cursor": None}, render_slots)


def _confirm_release(slot_id: str, yes: bool) -> None:
    if yes:
        return
    effect = "it frees the slot for the next run in the queue"
    if not sys.stdin.isatty():
        raise CliFailure(f"add --yes to release slot {slot_id} ({effect})", EXIT_USAGE)
    if not click.confirm(f"Release slot {slot_id}? ({effect})", err=True):
        raise CliFailure(f"slot {slot_id} not released", EXIT_REFUSED)


@limits_group.command("release")
@click.argument("slot_id")
@click.option("--yes", is_flag=True, help="Release without asking.")
@api_command
def limits_release(call: Call, slot_id: str, yes: bool) -> None:
    """Release a held slot (an operator's release; the next run in the queue gets it)."""
    _confirm_release(slot_id, yes)
    call.emit(call.client.release_slot(slot_id), render_released)


@limits_group.command("capacity")
@click.argument("limit")
@click.argument("capacity", metavar="N|reset")
@click.option("--key", default=None, help="A keyed limit: this key's capacity instead of the limit's.")
@api_command
def limits_capacity(call: Call, limit: str, capacity: str, key: str | None) -> None:
    """Override a limit's capacity, or one key's with --key (until `reset`; survives restarts)."""
    value = parse_capacity(capacity, limit)
    if key is not None:
        call.emit(call.client.set_key_capacity(limit, key, value), render_key_capacity)
        return
    call.emit(call.client.set_capacity(limit, value), render_capacity)


@limits_group.command("keys")
@click.argument("limit")
@click.option("--search", default=None, help="Only the keys that contain this text.")
@click.option(
    "--limit",
    "most",
    type=click.IntRange(1, 10_000),
    default=50,
    show_default=True,
    help="At most this many keys.",
)
@api_command
def limits_keys(call: Call, limit: str, search: str | None, most: int) -> None:
    """A keyed limit's keys, busiest first: capacity, busy, reserved and waiting."""
    call.emit(call.client.keys(limit, most, search), render_keys)


@limits_group.command("max-hold")
@click.argument("limit")
@click.argument("max_hold", metavar="DURATION|reset")
@api_command
def limits_max_hold(call: Call, limit: str, max_hold: str) -> None:
    """Override a limit's max hold, such as 2h (until `reset`; applies to slots granted afterwards)."""
    value = parse_max_hold(max_hold, limit)
    call.emit(call.client.set_max_hold(limit, value), render_max_hold)


def add_commands(main: click.Group) -> None:
    """Add this module's commands to the ``duro`` group."""
    for command in (start_command, runs_group, signal_command, limits_group):
        main.add_command(command)
