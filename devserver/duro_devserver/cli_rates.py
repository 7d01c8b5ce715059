"""``duro rates``: see rates and their waiters; override a limit; pause and resume. Exit codes and
``--json`` as for ``duro limits``."""

from __future__ import annotations

from typing import Any

import click

from .cli_api import EXIT_USAGE, Call, CliFailure, api_command, clean, format_time, table


def _limit_cell(rate: dict[str, Any]) -> str:
    """``150 (config 100)`` when the limit is overridden, else ``100``."""
    if rate.get("limit_override") is not None:
        return f"{rate.get('effective_limit')} (config {rate.get('limit')})"
    return str(rate.get("effective_limit", rate.get("limit")))


def _paused_cell(rate: dict[str, Any]) -> str:
    until = rate.get("paused_until")
    return "-" if until is None else f"until {format_time(until)}"


def render_rates(answer: dict[str, Any]) -> str:
    """``duro rates list``: one line per rate."""
    rates = answer.get("rates", [])
    if not rates:
        return 'no rates: declare them in duro.config.py (define_workspace(rates={"name": Rate(limit=..., per="1m")}))'
    rows = [
        [
            r["name"],
            _limit_cell(r),
            r.get("per"),
            "yes" if r.get("per_key") else "no",
            r.get("granted"),
            r.get("waiting"),
            _paused_cell(r),
        ]
        for r in rates
    ]
    return table(["NAME", "LIMIT", "PER", "PER KEY", "GRANTED", "WAITING", "PAUSED"], rows, right=(4, 5))


def rate_summary(rate: dict[str, Any]) -> str:
    """One line about a rate: its limit and window, its use of the window, waiters and pause."""
    paused = "" if rate.get("paused_until") is None else f", paused {_paused_cell(rate)}"
    return (
        f"{clean(rate.get('name'))}: {_limit_cell(rate)} per {rate.get('per')}, granted "
        f"{rate.get('granted')} in the current window, waiting {rate.get('waiting')}{paused}"
    )


def render_waiters(answer: dict[str, Any]) -> str:
    """``duro rates waiters``: the rate, then its waiters by key in queue order."""
    waiters = answer.get("waiters", [])
    head = rate_summary(answer.get("rate", {}))
    if not waiters:
        return f"{head}\n\nwaiters: none"
    rows = [
        [
            w.get("position"),
            clean(w.get("run_id")),
            "-" if w.get("key") is None else clean(w.get("key"), 48),
            w.get("cost"),
            format_time(w.get("enqueued_at")),
            format_time(w.get("timeout_at")) if w.get("timeout_at") else "-",
        ]
        for w in waiters
    ]
    return f"{head}\n\n" + table(["#", "RUN", "KEY", "COST", "SINCE", "TIMES OUT"], rows, right=(0, 3))


def render_rate(answer: dict[str, Any]) -> str:
    return rate_summary(answer.get("rate", {}))


def parse_rate_limit(text: str, rate: str) -> int | None:
    """``N`` (1..1,000,000) or ``reset`` (``None``) for ``duro rates limit``."""
    if text == "reset":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= 1_000_000:
        raise CliFailure(
            f"limit must be an integer from 1 to 1000000, or reset; got {text!r}: e.g. "
            f"duro rates limit {rate} 150, or duro rates limit {rate} reset",
            EXIT_USAGE,
        )
    return value


@click.group("rates")
def rates_group() -> None:
    """See rates and their waiters; override a limit; pause and resume."""


@rates_group.command("list")
@api_command
def rates_list(call: Call) -> None:
    """Each rate: limit and window, costs granted in the current window, waiting, paused."""
    call.emit(call.client.rates(), render_rates)


@rates_group.command("waiters")
@click.argument("rate")
@click.option("--key", default=None, help="A keyed rate: this key's queue alone.")
@api_command
def rates_waiters(call: Call, rate: str, key: str | None) -> None:
    """A rate's waiters, by key then in queue order."""
    call.emit(call.client.rate_waiters(rate, key), render_waiters)


@rates_group.command("limit")
@click.argument("rate")
@click.argument("limit", metavar="N|reset")
@api_command
def rates_limit(call: Call, rate: str, limit: str) -> None:
    """Override a rate's limit (until `reset`; survives restarts)."""
    call.emit(call.client.set_rate_limit(rate, parse_rate_limit(limit, rate)), render_rate)


@rates_group.command("reset")
@click.argument("rate")
@api_command
def rates_reset(call: Call, rate: str) -> None:
    """Drop an override of a rate's limit: back to duro.config.py."""
    call.emit(call.client.set_rate_limit(rate, None), render_rate)


@rates_group.command("pause")
@click.argument("rate")
@click.argument("duration")
@click.option("--key", default=None, help="A keyed rate: pause this key alone.")
@api_command
def rates_pause(call: Call, rate: str, duration: str, key: str | None) -> None:
    """Make no grant of a rate (or of one key) for DURATION, such as 5m, in every process."""
    call.emit(call.client.pause_rate(rate, duration, key), render_rate)


@rates_group.command("resume")
@click.argument("rate")
@click.option("--key", default=None, help="A keyed rate: resume this key alone.")
@api_command
def rates_resume(call: Call, rate: str, key: str | None) -> None:
    """End a pause of a rate (or of one key) now: its waiters are granted as the window allows."""
    call.emit(call.client.resume_rate(rate, key), render_rate)


def add_commands(main: click.Group) -> None:
    """Add this module's commands to the ``duro`` group."""
    main.add_command(rates_group)
