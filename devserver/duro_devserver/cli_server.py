"""Commands that run duro: ``duro dev`` (reloading dev server), ``duro serve`` (API + Studio, no
reload), ``duro worker`` (executes runs, no HTTP)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from duro import DuroError, WorkerOptions

from ._extras import dev_extra
from .logs import FORMATS, log, logging_config

if TYPE_CHECKING:
    from duro import Engine
    from duro.store import SqlStore

_LEASE = click.option(
    "--lease",
    default="30s",
    show_default=True,
    help="How long this worker's runs stay its own without a heartbeat (heartbeats every "
    "third of it); another worker takes them over once it has seen none for this long.",
)
_POLL = click.option(
    "--poll-interval",
    default="1s",
    show_default=True,
    help="The fallback pass for work that no wakeup announced.",
)
_WORKER_ID = click.option("--worker-id", default=None, help="Default: host-pid-random.")
_MAX_RESIDENT = click.option(
    "--max-resident-runs",
    default=WorkerOptions.max_resident_runs,
    show_default=True,
    type=click.IntRange(0),
    help="Runs held in memory at most (executing or waiting); the longest idle waiting runs "
    "beyond it are evicted and replayed when their wait ends.",
)
_MAX_CONCURRENT = click.option(
    "--max-concurrent-runs",
    default=WorkerOptions.max_concurrent_runs,
    show_default=True,
    type=click.IntRange(1),
    help="Runs executed at once at most; due work beyond it waits in the store.",
)
_EVICT_AFTER = click.option(
    "--evict-after",
    default=WorkerOptions.evict_after,
    show_default=True,
    help="How long a run waiting on a signal, a slot or a child stays in memory; a sleep "
    "longer than this leaves memory at once.",
)
_UNLOAD_AFTER = click.option("--unload-after", default=None, hidden=True, help="The former --evict-after.")
_PROJECT = click.argument("directory", type=click.Path(file_okay=False, path_type=Path), default=Path("."))
_HOST = click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on; anything but loopback needs a token.",
)
_TOKEN = click.option(
    "--token",
    envvar="DURO_TOKEN",
    default=None,
    help="Require this token on every API call (env DURO_TOKEN).",
)
_ALLOW_HOST = click.option(
    "--allow-host",
    "allow_hosts",
    multiple=True,
    metavar="NAME",
    help="Also answer requests for this Host name (repeatable; '*.example.com' for its "
    "subdomains): the name a proxy or other machines reach this server by. "
    "Always accepted: localhost and the address it listens on.",
)
_LOG_FORMAT = click.option(
    "--log-format",
    type=click.Choice(FORMATS),
    default="text",
    show_default=True,
    help="json: one JSON object per line on stderr (ts, level, logger, message and the line's "
    "fields: event, limit, workflow, wait_ms, ...), for a log shipper. Either way the duro.* "
    "loggers print at INFO: every slot grant, expiry, timeout and refused start.",
)
_DATABASE = click.option(
    "--database-url",
    envvar="DURO_DATABASE_URL",
    default=None,
    help="Default: sqlite:///DIRECTORY/.duro/dev.db (env DURO_DATABASE_URL).",
)


def _project_dir(directory: Path) -> Path:
    root = directory.resolve()
    if not root.is_dir():
        raise click.UsageError(
            f"project directory {directory} does not exist; create one with `duro init {directory}`"
        )
    return root


def project_database_url(root: Path, database_url: str | None = None) -> str:
    """``database_url``, or the project's own SQLite store, as ``duro dev`` uses it."""
    return database_url or f"sqlite:///{root / '.duro' / 'dev.db'}"


def _fail(err: DuroError) -> None:
    click.echo(f"error: {err}", err=True)
    sys.exit(2)


def _create_schema_while_restarting(store: SqlStore) -> None:
    """``store.create_schema()``, made again while the database restarts or fails over (for as long
    as an engine's store calls are, 30 s): a worker that starts then waits for it, as a running one
    does, instead of exiting."""
    from duro._clock import SystemClock, pause
    from duro.worker._gateway import STORE_RETRY_S

    clock = SystemClock()
    give_up, wait = clock.monotonic_ms() + STORE_RETRY_S * 1000, 0.05
    while True:
        try:
            store.create_schema()
            return
        except Exception as err:
            # a server that refuses connections comes as the DuroError that names it, its cause kept
            cause = err.__context__ if isinstance(err, DuroError) else err
            if cause is None or not store.is_transient(cause) or clock.monotonic_ms() > give_up:
                raise
        pause(wait)
        wait = min(wait * 2, 0.5)


def open_store(url: str) -> None:
    """Open the store once before anything starts: a database that cannot be used (a file that is
    not SQLite, say) is a :class:`DuroError` that names it and says what to do, not a traceback from
    deep inside the server's start-up."""
    import sqlalchemy as sa

    from duro.store import SqlStore

    store = SqlStore(url)
    try:
        _create_schema_while_restarting(store)
    except sa.exc.DatabaseError as err:
        reason = " ".join(str(getattr(err, "orig", None) or err).split())
        if store.dialect == "sqlite":
            path = store.url.database
            raise DuroError(
                f"{path} is not a usable SQLite database ({reason}): move it away (or delete it, "
                f"losing the runs it held) and start again for a fresh one, or pass "
                f"--database-url for another store"
            ) from None
        raise DuroError(
            f"the database at {store.safe_url} cannot be used ({reason}): check --database-url "
            f"(or DURO_DATABASE_URL)"
        ) from None
    finally:
        store.close()


def add_commands(main: click.Group) -> None:
    """Add ``dev``, ``serve``, ``worker`` and ``health`` to the ``duro`` group."""
    add_health(main)

    @main.command("dev")
    @_PROJECT
    @click.option("--port", default=8787, show_default=True, type=click.IntRange(0, 65535))
    @_HOST
    @_ALLOW_HOST
    @_TOKEN
    @_DATABASE
    @_LOG_FORMAT
    @click.option(
        "--reload/--no-reload",
        default=True,
        show_default=True,
        help="Reload on every saved change to the workflows or duro.config.py.",
    )
    def dev(
        directory: Path,
        port: int,
        host: str,
        allow_hosts: tuple[str, ...],
        token: str | None,
        database_url: str | None,
        log_format: str,
        reload: bool,
    ) -> None:
        """Run the dev server on DIRECTORY: API and Studio, reloading on every change."""
        with dev_extra():
            from .app import create_app
            from .project import DevProject
            from .server import run_server
        root = _project_dir(directory)
        try:
            open_store(project_database_url(root, database_url))
            project = DevProject(root, database_url, watch=reload)
            app = create_app(project, token=token, allowed_hosts=(host, *allow_hosts))
            run_server(app, host, port, project_dir=root, token=token, log_format=log_format)
        except DuroError as err:
            _fail(err)

    @main.command("serve")
    @_PROJECT
    @click.option("--port", default=8787, show_default=True, type=click.IntRange(0, 65535))
    @_HOST
    @_ALLOW_HOST
    @_TOKEN
    @_DATABASE
    @_LOG_FORMAT
    @click.option(
        "--worker/--no-worker",
        default=True,
        show_default=True,
        help="Also execute runs in this process (otherwise only the API and Studio).",
    )
    @_LEASE
    @_POLL
    @_WORKER_ID
    def serve(
        directory: Path,
        port: int,
        host: str,
        allow_hosts: tuple[str, ...],
        token: str | None,
        database_url: str | None,
        log_format: str,
        worker: bool,
        lease: str,
        poll_interval: str,
        worker_id: str | None,
    ) -> None:
        """Serve the API and Studio for DIRECTORY's project, without reloading."""
        with dev_extra():
            from .app import create_app
            from .server import run_server
        from duro import Engine

        from .source import FixedEngine

        root = _project_dir(directory)
        try:
            open_store(project_database_url(root, database_url))
            engine = Engine.from_project(
                root,
                database_url=project_database_url(root, database_url),
                options=WorkerOptions(lease=lease, poll_interval=poll_interval, worker_id=worker_id),
            )
            source = FixedEngine(engine, run_worker=worker, project=str(root))
            app = create_app(source, token=token, allowed_hosts=(host, *allow_hosts))
            run_server(app, host, port, project_dir=root, token=token, log_format=log_format)
        except DuroError as err:
            _fail(err)

    @main.command("worker")
    @_PROJECT
    @_DATABASE
    @_LOG_FORMAT
    @_LEASE
    @_POLL
    @_WORKER_ID
    @_MAX_RESIDENT
    @_MAX_CONCURRENT
    @_EVICT_AFTER
    @_UNLOAD_AFTER
    def worker(
        directory: Path,
        database_url: str | None,
        log_format: str,
        lease: str,
        poll_interval: str,
        worker_id: str | None,
        max_resident_runs: int,
        max_concurrent_runs: int,
        evict_after: str,
        unload_after: str | None,
    ) -> None:
        """Execute DIRECTORY's workflows until SIGINT / SIGTERM (then hand in-flight runs back)."""
        import asyncio
        import logging.config

        from duro import Engine

        if unload_after is not None:
            click.echo(
                "duro worker: --unload-after is now --evict-after (the old name will be removed)", err=True
            )
            evict_after = unload_after

        root = _project_dir(directory)
        logging.config.dictConfig(logging_config(log_format))
        try:
            open_store(project_database_url(root, database_url))
            options = WorkerOptions(
                lease=lease,
                poll_interval=poll_interval,
                worker_id=worker_id,
                max_resident_runs=max_resident_runs,
                max_concurrent_runs=max_concurrent_runs,
                evict_after=evict_after,
            )
            engine = Engine.from_project(
                root, database_url=project_database_url(root, database_url), options=options
            )
            asyncio.run(_work(engine))
        except DuroError as err:
            _fail(err)


async def _work(engine: Engine) -> None:
    import asyncio
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    async with engine:
        assert engine.worker is not None
        log.info(
            "worker %s running %s; Ctrl-C to stop",
            engine.worker.id,
            ", ".join(sorted(engine.workflows)) or "nothing",
            extra={"event": "worker.started"},
        )
        await stop.wait()
        log.info("stopping; in-flight runs are handed back", extra={"event": "worker.stopping"})


def add_health(main: click.Group) -> None:
    """``duro health``: is the store reachable, and which workers are alive."""

    @main.command("health")
    @_PROJECT
    @_DATABASE
    @click.option(
        "--lease", default="30s", show_default=True, help="The workers' lease: older heartbeats are dead."
    )
    @click.option("--json", "as_json", is_flag=True, help="Print the answer as JSON.")
    def health(directory: Path, database_url: str | None, lease: str, as_json: bool) -> None:
        """Check the store and list its workers (exit 0: reachable and at least one worker alive;
        1: no live worker; 3: the store cannot be reached)."""
        from duro.store import SqlStore
        from duro.tooling import duration_ms

        root = directory.resolve()
        url = project_database_url(root, database_url)
        try:
            lease_ms = duration_ms(lease, "--lease")
            store = SqlStore(url)
        except DuroError as err:
            _fail(err)
        try:
            store.create_schema()
            listed = store.workers.all()
        except Exception as err:  # noqa: BLE001 - any driver error means "unreachable" here
            click.echo(
                f"error: the store at {store.safe_url} cannot be reached: {' '.join(str(err).split())}",
                err=True,
            )
            sys.exit(3)
        finally:
            store.close()
        now = _wall_ms()
        for worker in listed:
            reference = worker["db_now"] if worker["db_now"] is not None else now
            worker["heartbeat_age_ms"] = max(0, reference - worker["heartbeat_at"])
            worker["alive"] = worker["heartbeat_age_ms"] <= lease_ms
            del worker["db_now"]
        alive = sum(1 for worker in listed if worker["alive"])
        if as_json:
            click.echo(json.dumps({"store": store.safe_url, "workers": listed, "alive": alive}, indent=2))
        else:
            click.echo(f"store {store.safe_url}: reachable; {alive} of {len(listed)} worker(s) alive")
            for worker in listed:
                state = "alive" if worker["alive"] else "dead"
                click.echo(
                    f"  {worker['id']:<48} {state:<5} heartbeat {worker['heartbeat_age_ms'] / 1000:.1f}s ago "
                    f"runs {worker['runs']}  {worker['host']} pid {worker['pid']}"
                )
        sys.exit(0 if alive else 1)


def _wall_ms() -> int:
    from duro.tooling import SystemClock

    return SystemClock().now_ms()
