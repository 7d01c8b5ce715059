"""``duro replay-check`` and ``duro runs export``: before a deploy, replay recorded histories on the
project's current code (see ``duro.client._replaycheck``), in the harness's simulated world.

Both read the project's database directly (``--database-url``, default the dev server's SQLite file):
a check needs every run's steps, and must not depend on a server being up. Neither writes to it: the
store is opened read-only (SQLite ``mode=ro``, PostgreSQL read-only sessions) and never migrated.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from duro import DuroError
from duro.tooling import UNFINISHED, duration_ms

from .cli_api import runs_group
from .cli_server import project_database_url

if TYPE_CHECKING:
    from duro.store import RunRecord, SqlStore
    from duro.tooling import ReplayOutcome

PAGE = 500


def _runs(store: SqlStore, workflow: str | None, statuses: tuple[str, ...]) -> Iterator[RunRecord]:
    """Every run of these statuses (every namespace), newest first, a page at a time."""
    before: tuple[int, str] | None = None
    while True:
        page = store.runs.page(None, workflow, statuses, None, PAGE, before)
        yield from page
        if len(page) < PAGE:
            return
        before = (page[-1].created_at, page[-1].id)


def _selected(store: SqlStore, workflow: str | None, cutoff: int | None) -> Iterator[RunRecord]:
    """The unfinished runs, then those that ended since ``cutoff`` (read by their end: however long
    the history, only what the window holds)."""
    yield from _runs(store, workflow, UNFINISHED)
    if cutoff is None:
        return
    after: tuple[int, str] | None = None
    while True:
        page = store.runs.finished_since(cutoff, after, PAGE)
        yield from (run for run in page if workflow is None or run.workflow == workflow)
        if len(page) < PAGE:
            return
        after = (page[-1].ended_at or 0, page[-1].id)


async def _check(
    project: Path, url: str, workflow: str | None, since_ms: int | None
) -> tuple[int, list[ReplayOutcome]]:
    from duro.store import SqlStore
    from duro.tooling import SystemClock
    from duro_harness import simulated  # the harness's world: its own store, a simulated clock

    # Read the real clock now: inside the harness's world time is frozen at its simulated instant.
    cutoff = None if since_ms is None else SystemClock().now_ms() - since_ms
    store = SqlStore(url, read_only=True)  # a missing file or another schema version: exit 2
    checked, diverged = 0, []
    try:
        async with simulated(project) as env:
            for run in _selected(store, workflow, cutoff):
                outcome = await env.engine.replay_history(run, store.steps.of(run.id))
                checked += 1
                if outcome.diverged:
                    diverged.append(outcome)
    finally:
        store.close()
    return checked, diverged


def _describe(outcome: ReplayOutcome) -> str:
    where = f"run {outcome.run_id} ({outcome.workflow}, version {outcome.version})"
    if outcome.error is not None:
        return f"{where}: {outcome.error}"
    return f"{where} diverges at seq {outcome.seq}: recorded {outcome.recorded}, the code now asks for {outcome.asked}"


def add_commands(main: click.Group) -> None:
    @main.command("replay-check")
    @click.argument("directory", type=click.Path(file_okay=False, path_type=Path), default=Path("."))
    @click.option(
        "--database-url",
        envvar="DURO_DATABASE_URL",
        default=None,
        help="Default: sqlite:///<DIR>/.duro/dev.db",
    )
    @click.option("--workflow", metavar="NAME", default=None, help="Only runs of this workflow.")
    @click.option(
        "--since",
        metavar="DURATION",
        default=None,
        help="Also the runs that finished within this long (e.g. 7d); default: unfinished runs only.",
    )
    @click.option("--json", "as_json", is_flag=True, help="Print the outcome as JSON.")
    def replay_check(
        directory: Path, database_url: str | None, workflow: str | None, since: str | None, as_json: bool
    ) -> None:
        """Replay the recorded history of every unfinished run (and, with --since, of recently
        finished ones) on the project's current code, executing no step body. Lists each run that
        would diverge and exits 1 if any would: run it before a deploy."""
        import asyncio

        root = directory.resolve()
        try:
            since_ms = None if since is None else duration_ms(since, "--since")
        except (DuroError, ValueError, TypeError) as err:
            raise click.UsageError(f"--since: {err}") from None
        try:
            checked, diverged = asyncio.run(
                _check(root, project_database_url(root, database_url), workflow, since_ms)
            )
        except DuroError as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(2)
        if as_json:
            report: dict[str, Any] = {
                "checked": checked,
                "diverged": [{**o._asdict(), "diverged": True} for o in diverged],
            }
            click.echo(json.dumps(report, indent=2))
        else:
            for outcome in diverged:
                click.echo(_describe(outcome))
            verdict = "all replay on this code" if not diverged else f"{len(diverged)} would diverge"
            click.echo(f"checked {checked} run(s): {verdict}")
        sys.exit(1 if diverged else 0)

    @runs_group.command("export")
    @click.argument("run_id")
    @click.option(
        "--project",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("."),
        help="The project directory (its .duro/dev.db is the default database).",
    )
    @click.option(
        "--database-url",
        envvar="DURO_DATABASE_URL",
        default=None,
        help="Default: sqlite:///<project>/.duro/dev.db",
    )
    @click.option(
        "-o",
        "--output",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Write here (default: stdout).",
    )
    def runs_export(run_id: str, project: Path, database_url: str | None, output: Path | None) -> None:
        """Write RUN_ID's history (its record and steps) as JSON, for ``await env.replay(...)`` in a test."""
        from duro.store import SqlStore
        from duro.tooling import history_to_json

        try:
            store = SqlStore(project_database_url(project.resolve(), database_url), read_only=True)
        except DuroError as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(2)
        try:
            run = store.runs.get(run_id)
            if run is None:
                click.echo(
                    f"error: run {run_id!r} does not exist in {store.safe_url}; list runs with `duro runs list`",
                    err=True,
                )
                sys.exit(2)
            text = json.dumps(history_to_json(run, store.steps.of(run_id)), indent=2) + "\n"
        except DuroError as err:
            click.echo(f"error: {err}", err=True)
            sys.exit(2)
        finally:
            store.close()
        if output is None:
            click.echo(text, nl=False)
        else:
            output.write_text(text)
            click.echo(f"wrote the history of run {run_id} to {output}", err=True)
