"""The ``duro`` command line. Thin: each command calls the SDK and formats the answer."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from duro import DuroError

from .cli_server import project_database_url

if TYPE_CHECKING:
    from duro import Engine, RunHandle
    from duro.tooling import LimitInfo, SlotInfo


def _steps_table(steps: list[Any]) -> str:
    lines = [f"{'seq':>3}  {'kind':<11} {'name':<20} {'status':<9} result"]
    for s in steps:
        outcome = json.dumps(s.result) if s.error is None else f"{s.error['type']}: {s.error['message']}"
        lines.append(f"{s.seq:>3}  {s.kind:<11} {s.name:<20} {s.status:<9} {outcome}")
    return "\n".join(lines)


QUEUE_POLL_S = 0.5  # how often a run that has not ended is checked for a slot queue it waits in


def queue_line(run_id: str, limit: LimitInfo | None, name: str, slots: list[SlotInfo]) -> str:
    """Where ``run_id`` waits in the queue of limit ``name``, for a person watching ``duro run``."""
    capacity = f"capacity {limit.effective_capacity}" if limit is not None else "capacity unknown"
    busy = sum(1 for s in slots if s.state in ("busy", "reserved"))
    waiting = sum(1 for s in slots if s.state == "waiting")
    mine = next((s for s in slots if s.run_id == run_id and s.state in ("waiting", "reserved")), None)
    where = f"{capacity}, {busy} busy, {waiting} waiting"
    if mine is not None and mine.state == "reserved":
        return f"run {run_id} waits for a slot of limit {name!r} ({where}): a slot is reserved for it"
    position = "" if mine is None or mine.position is None else f": position {mine.position} of {waiting}"
    return f"run {run_id} waits for a slot of limit {name!r} ({where}){position}"


async def _queue_line(engine: Engine, run_id: str) -> tuple[str | None, str | None]:
    """The limit whose queue the run waits in (``None`` if none) and the line that says where."""
    name = (await engine.limits.queued_for([run_id])).get(run_id)
    if name is None:
        return None, None
    limit = next((info for info in await engine.limits.list() if info.name == name), None)
    return name, queue_line(run_id, limit, name, await engine.limits.slots(name))


async def _result_telling_the_queue(engine: Engine, handle: RunHandle) -> None:
    """``handle.result()``; meanwhile, on stderr, where the run waits for a slot, each time that
    changes (a run that ends within the first poll costs no query)."""
    import asyncio  # each command imports what it uses: ``duro --help`` stays quick

    result = asyncio.ensure_future(handle.result())
    said: tuple[str | None, str | None] = (None, None)
    try:
        while not (await asyncio.wait({result}, timeout=QUEUE_POLL_S))[0]:
            now = await _queue_line(engine, handle.id)
            if now[1] is not None and now[1] != said[1]:
                click.echo(now[1], err=True)
            elif now[0] is None and said[0] is not None:
                click.echo(f"run {handle.id} left the queue of limit {said[0]!r}", err=True)
            said = now
    finally:
        result.cancel()
    result.result()


async def _run(project: Path, workflow: str, inp: Any, database_url: str, as_json: bool) -> int:
    from duro import Engine, RunFailedError

    engine = Engine.from_project(project, database_url=database_url)
    async with engine:
        handle = await engine.start(workflow, inp)
        try:
            await _result_telling_the_queue(engine, handle)
            failed = None
        except RunFailedError as err:
            _result, failed = None, err
        steps = await handle.steps()
        info = await engine.get_run(handle.id)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "run_id": handle.id,
                    "status": info.status.value,
                    "output": info.output,
                    "error": info.error,
                    "steps": [
                        {
                            "seq": s.seq,
                            "kind": s.kind,
                            "name": s.name,
                            "status": s.status,
                            "result": s.result,
                            "error": s.error,
                        }
                        for s in steps
                    ],
                },
                indent=2,
            )
        )
    else:
        click.echo(f"run {handle.id} of {workflow}: {info.status.value}")
        click.echo(_steps_table(steps))
        click.echo(f"result: {json.dumps(info.output)}" if failed is None else f"error: {failed}")
    return 0 if failed is None else 1


@click.group()
@click.version_option(package_name="duro")
def main() -> None:
    """duro: durable workflows that share scarce capacity."""


@main.command("run")
@click.argument("workflow")
@click.option("--input", "input_json", default="null", help="The run's input as JSON.")
@click.option(
    "--project",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    help="The project directory (holds duro.config.py and workflows/).",
)
@click.option(
    "--database-url",
    envvar="DURO_DATABASE_URL",
    default=None,
    help="Default: sqlite:///<project>/.duro/dev.db",
)
@click.option("--json", "as_json", is_flag=True, help="Print the run as JSON.")
def run_command(
    workflow: str, input_json: str, project: Path, database_url: str | None, as_json: bool
) -> None:
    """Run WORKFLOW of the project to completion here, then print its steps and result."""
    import asyncio

    try:
        inp = json.loads(input_json)
    except json.JSONDecodeError as err:
        raise click.UsageError(f"--input is not JSON ({err}); e.g. --input '{{\"id\": 1}}'") from None
    try:
        code = asyncio.run(
            _run(
                project.resolve(),
                workflow,
                inp,
                project_database_url(project.resolve(), database_url),
                as_json,
            )
        )
    except DuroError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    sys.exit(code)


def _add_command_groups() -> None:
    """Each family of commands lives in its own module and adds itself to ``main``."""
    from . import cli_api, cli_init, cli_rates, cli_replay, cli_server

    for module in (cli_init, cli_server, cli_api, cli_rates, cli_replay):
        module.add_commands(main)


_add_command_groups()


if __name__ == "__main__":
    main()
