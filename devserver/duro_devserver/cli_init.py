"""`duro init DIR`: scaffold a runnable project from templates/."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from duro import DuroError

from .scaffold import scaffold


def add_commands(main: click.Group) -> None:
    """Add this module's commands to the ``duro`` group."""
    main.add_command(init_command)


@click.command("init")
@click.argument("directory", type=click.Path(path_type=Path))
@click.option("--name", default=None, help="The project's name (default: the directory's name).")
def init_command(directory: Path, name: str | None) -> None:
    """Create a duro project in DIRECTORY: a config with one limit, two workflows and their tests.

    DIRECTORY must be new or empty; nothing in it is ever overwritten.
    """
    try:
        written = scaffold(directory, name=name)
    except DuroError as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(2)
    click.echo(f"Created a duro project in {directory}:")
    for path in written:
        click.echo(f"  {path.relative_to(directory).as_posix()}")
    click.echo("\nNext:")
    if directory.resolve() != Path.cwd().resolve():
        click.echo(f"  cd {shlex.quote(str(directory))}")
    click.echo("  duro dev .    # the dev server and Studio on http://127.0.0.1:8787")
    click.echo("  pytest        # the project's tests, under simulated time")
