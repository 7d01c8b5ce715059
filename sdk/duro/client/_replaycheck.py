"""The replay check: a run's recorded history replayed against the code registered now, executing
nothing (``duro replay-check``, ``env.replay``, ``Engine.replay_history``).

Every durable call takes its record from the history (``CheckedHistory``): a completed or failed
call returns or raises what was recorded, as in any replay, so no step body runs and nothing is
written. The replay stops where the history does: at the first call with no record, or with a
record still open (a sleep, a signal wait, a slot wait or a retry not over): the code is compatible
up to there. A cancel delivered in the run is raised again where it was recorded (see ``_cancel``). A call that differs from its record is a divergence (``NonDeterminismError``), reported
with its sequence number and both calls.

A history travels as JSON (``history_to_json`` / ``history_from_json``: the run's record and its
steps, as ``duro runs export`` writes them).
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from .._errors import DuroError, NonDeterminismError, RunCancelled
from .._serde import restore_error, stored_json
from .._states import ENDED, StepKind
from ..definitions._definitions import Registry
from ..run import _cancel, _current
from ..run._context import History, RunContext
from ..run._runtime import Runtime
from ..store import RunRecord, StepRecord, settle_sleeps

FORMAT = "duro.history/1"


class HistoryEnd(BaseException):
    """The replay reached the end of the recorded history (a ``BaseException``: workflow code that
    catches ``Exception`` cannot swallow it)."""

    def __init__(self, seq: int) -> None:
        super().__init__(seq)
        self.seq = seq


class CheckedHistory(History):
    """A history that ends: a call with no record, or an open one, raises :class:`HistoryEnd`."""

    __slots__ = ()

    def take(self, kind: StepKind, name: str) -> tuple[int, StepRecord | None]:
        seq, rec = super().take(kind, name)
        if rec is None or rec.status not in ENDED:
            raise HistoryEnd(seq)
        return seq, rec


class ReplayOutcome(NamedTuple):
    """What replaying one run's history found. ``diverged``: the code asks for ``asked`` where the
    history recorded ``recorded``, at ``seq``. ``replayed``: the recorded calls the code made again.
    ``ended``: how the replay stopped (``history``: where the history does; ``returned`` or
    ``raised``: the code ran to its end; ``diverged``; ``error``: it could not start, ``error``
    says why)."""

    run_id: str
    workflow: str
    version: str
    ended: str
    replayed: int
    seq: int | None = None
    recorded: str | None = None
    asked: str | None = None
    error: str | None = None

    @property
    def diverged(self) -> bool:
        """Whether the code would fail this run (a divergence, or no code for its version here)."""
        return self.ended in ("diverged", "error")


async def replay(
    runtime: Runtime, registry: Registry, run: RunRecord, steps: list[StepRecord]
) -> ReplayOutcome:
    """Replay ``run``'s history (``steps``) on the code in ``registry``, in a task of its own."""

    def outcome(ended: str, replayed: int = 0, **more: Any) -> ReplayOutcome:
        return ReplayOutcome(run.id, run.workflow, run.version, ended, replayed, **more)

    spec = registry.get(run.workflow, run.version)
    if spec is None or spec.invoke is None:
        known = ", ".join(registry.versions(run.workflow))
        why = f"registered versions: {known}" if known else "it is not registered"
        return outcome(
            "error", error=f"workflow {run.workflow!r} version {run.version!r} has no code here ({why})"
        )
    ctx = RunContext(runtime, run)
    ctx.history = CheckedHistory(run.id, settle_sleeps(steps, run))
    if _cancel.delivers(steps):
        ctx.cancel = _cancel.Cancel()  # a cancel delivered is raised again where it was: no request

    async def body() -> Any:
        _current.current_run.set(ctx)
        inp = spec.input.load(run.input) if spec.takes_input else None
        assert spec is not None and spec.invoke is not None
        return await spec.invoke(inp, ctx)

    task = asyncio.get_running_loop().create_task(body(), context=contextvars.Context())
    history = ctx.history
    try:
        await task
        ended = "returned"
    except HistoryEnd as end:
        return outcome("history", end.seq)
    except NonDeterminismError as err:
        return outcome("diverged", err.seq, seq=err.seq, recorded=err.recorded, asked=err.asked)
    except RunCancelled:
        ended = "raised"  # the cancel delivered in the run, raised again at the same call
    except Exception as err:  # noqa: BLE001 - a recorded failure raised again, or the code's own
        ended = "raised"
        again = None if ctx.fatal is not None else _recorded_failure(err, run, steps)
        if ctx.fatal is None and again is None:
            recorded = [_said(text) for text in _failures(run, steps)]
            was = f"; the history's failures: {', '.join(recorded)}" if recorded else ""
            return outcome("error", history.next_seq, error=f"{_name(err)}: {err}{was}")
        if again is not None and run.status != "failed" and _stands_in(err, again):
            # the worker reads the row the same way: its DuroError escapes every `except` of the
            # recorded class, and the unfinished run fails on it
            return outcome(
                "error",
                history.next_seq,
                error=f"a recorded error ({_said(again)}) is not rebuilt as its own class here (a "
                f"worker raises DuroError in its place, which no `except` of that class catches): "
                f"a worker would fail this run with DuroError: {err}",
            )
    fatal = ctx.fatal
    if isinstance(fatal, NonDeterminismError):  # caught by the code, still a divergence
        return outcome("diverged", fatal.seq, seq=fatal.seq, recorded=fatal.recorded, asked=fatal.asked)
    return outcome(ended, history.next_seq)


def history_to_json(run: RunRecord, steps: list[StepRecord]) -> dict[str, Any]:
    """A run's history as JSON-able data (``duro runs export``)."""
    record = run._asdict()
    record.pop("fresh", None)
    return {"format": FORMAT, "run": record, "steps": [step._asdict() for step in steps]}


def history_from_json(data: Mapping[str, Any] | str) -> tuple[RunRecord, list[StepRecord]]:
    """The run and steps of an exported history (a mapping, or its JSON text)."""
    loaded = json.loads(data) if isinstance(data, str) else data
    if not isinstance(loaded, Mapping) or loaded.get("format") != FORMAT:
        raise ValueError(
            f"not a duro history: expected an object with format {FORMAT!r} (duro runs export writes one)"
        )
    try:
        run = RunRecord(**{**loaded["run"], "tags": list(loaded["run"].get("tags") or [])})
        steps = [StepRecord(**step) for step in loaded["steps"]]
    except (KeyError, TypeError) as err:
        raise ValueError(f"this duro history is incomplete or malformed: {err}") from None
    return run, steps


def _failures(run: RunRecord, steps: list[StepRecord]) -> list[str]:
    """The errors the history recorded: its failed steps', and the run's own if it failed."""
    found = [step.error for step in steps if step.status == "failed" and step.error]
    return found + ([run.error] if run.status == "failed" and run.error else [])


def _recorded_failure(err: Exception, run: RunRecord, steps: list[StepRecord]) -> str | None:
    """The stored failure ``err`` is, raised again: read exactly as a worker reads it
    (``restore_error``), the same type with the same message; ``None`` if it is none of them."""
    for text in _failures(run, steps):
        rebuilt = restore_error(text)
        if type(rebuilt) is type(err) and str(rebuilt) == str(err):
            return text
    return None


def _stands_in(err: Exception, text: str) -> bool:
    """Whether ``err`` is the DuroError a worker raises in place of a stored error it cannot rebuild
    as its own class (a ``BaseException`` such as ``SystemExit``, or a class not loaded here)."""
    data = stored_json(text)
    stored_type = data.get("type") if isinstance(data, dict) else None
    return type(err) is DuroError and stored_type != _name(err)


def _name(err: BaseException) -> str:
    return f"{type(err).__module__}.{type(err).__qualname__}"


def _said(text: str) -> str:
    data = stored_json(text)
    return f"{data.get('type')}: {data.get('message')}" if isinstance(data, dict) else "unreadable"
