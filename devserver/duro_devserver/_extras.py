"""The dev extra (``pip install 'duro[dev]'``): the dev server, Studio, hot reload and the client
commands need its packages. They are imported inside those commands only, so that ``duro --help``,
``duro init``, ``duro run``, ``duro worker`` and ``duro health`` work without it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any

import click

DEV_PACKAGES = frozenset({"starlette", "uvicorn", "watchfiles", "sse_starlette", "httpx"})


class MissingExtra(click.ClickException):
    """Printed as ``error: <message>`` (as the CLI's other failures are); exit code 1."""

    def show(self, file: IO[Any] | None = None) -> None:
        click.echo(f"error: {self.format_message()}", err=True, file=file)


def _command_name(ctx: click.Context | None) -> str:
    names: list[str] = []
    while ctx is not None and ctx.parent is not None:
        names.append(ctx.info_name or "")
        ctx = ctx.parent
    return " ".join(["duro", *reversed(names)])


@contextmanager
def dev_extra() -> Iterator[None]:
    """Around the imports of a command that needs the dev extra: a package of it that is not
    installed is a one-line click error naming the extra (exit 1), not a traceback."""
    try:
        yield
    except ModuleNotFoundError as err:
        if (err.name or "").partition(".")[0] not in DEV_PACKAGES:
            raise
        command = _command_name(click.get_current_context(silent=True))
        raise MissingExtra(f"{command} needs the dev extra: pip install 'duro[dev]'") from None
