"""Running the app with uvicorn, and telling the CLI where it runs.

Once listening, the server writes ``DIR/.duro/server.json`` (``url``, ``pid``, ``token_required``;
never the token itself); the CLI finds the local server there. The file is removed on shutdown.
``port=0`` picks a free port (tests use it and read the file).
"""

from __future__ import annotations

import asyncio
import copy
import errno
import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

import uvicorn
from starlette.applications import Starlette

from duro import DuroError

from .logs import log, logging_config
from .security import is_loopback

SERVER_FILE = Path(".duro") / "server.json"


def check_binding(host: str, token: str | None) -> None:
    """Loopback by default; any other address only with a token."""
    if not is_loopback(host) and not token:
        raise DuroError(
            f"refusing to listen on {host} without a token: anyone who can reach it could start, "
            f"cancel and release; set DURO_TOKEN (or --token) and pass it to clients, or keep "
            f"the default --host 127.0.0.1"
        )


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, info_file: Path | None, token_required: bool) -> None:
        super().__init__(config)
        self.info_file = info_file
        self.token_required = token_required
        self.url: str | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        if not self.servers:
            return
        host, port = self.servers[0].sockets[0].getsockname()[:2]
        shown = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        self.url = f"http://{'[' + shown + ']' if ':' in shown else shown}:{port}"
        if self.info_file is not None:
            self.info_file.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.info_file.with_suffix(".tmp")
            temporary.write_text(
                json.dumps({"url": self.url, "pid": os.getpid(), "token_required": self.token_required})
            )
            temporary.replace(self.info_file)
        log.info(
            "serving the API and Studio at %s", self.url, extra={"event": "server.listening", "url": self.url}
        )

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        try:
            await super().shutdown(sockets)
        finally:
            if self.info_file is not None:
                self.info_file.unlink(missing_ok=True)


class _NoQueryStrings(logging.Filter):
    """Access log lines keep the path and drop the query string (``/?token=...`` must not be logged)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and len(record.args) >= 3 and isinstance(record.args[2], str):
            record.args = (*record.args[:2], record.args[2].split("?", 1)[0], *record.args[3:])
        return True


def bind(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything else starts: a port in use (another ``duro dev``?)
    is a :class:`DuroError` that says to pass ``--port``, not uvicorn's ``[Errno 98]``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if err.errno == errno.EADDRINUSE:
            raise DuroError(
                f"port {port} on {host} is in use (another `duro dev` or `duro serve`?): stop that "
                f"server, or pass --port N for another port (--port 0 picks a free one)"
            ) from None
        if err.errno == errno.EACCES:
            raise DuroError(
                f"not allowed to listen on {where} (ports below 1024 need root): pass --port N "
                f"with N from 1024 up, or --port 0 for a free one"
            ) from None
        raise DuroError(
            f"cannot listen on {where} ({err.strerror or err}): check --host (an address of "
            f"this machine, such as 127.0.0.1) and --port"
        ) from None
    return sock


def uvicorn_log_config(log_format: str) -> dict[str, Any]:
    """uvicorn's logging configuration with the ``duro`` loggers' added: in ``json``, uvicorn's
    lines (errors, access) are JSON lines too; in ``text``, they keep uvicorn's format."""
    if log_format == "json":
        return logging_config("json", loggers=("uvicorn", "uvicorn.access"))
    config = copy.deepcopy(uvicorn.config.LOGGING_CONFIG)
    for part, entries in logging_config(log_format).items():
        if isinstance(entries, dict):
            config[part].update(entries)
    return config


def run_server(
    app: Starlette,
    host: str,
    port: int,
    *,
    project_dir: Path | None,
    token: str | None,
    access_log: bool = True,
    log_format: str = "text",
) -> None:
    """Serve ``app`` until SIGINT / SIGTERM (a graceful stop: the engine hands its runs back).
    ``log_format``: ``text`` or ``json`` (see :mod:`.logs`)."""
    check_binding(host, token)
    sock = bind(host, port)
    config = uvicorn.Config(
        app,
        host=host,
        port=port,
        lifespan="on",
        access_log=access_log,
        log_level="info",
        log_config=uvicorn_log_config(log_format),
        timeout_graceful_shutdown=5,
    )
    logging.getLogger("uvicorn.access").addFilter(_NoQueryStrings())
    server = _Server(config, None if project_dir is None else project_dir / SERVER_FILE, token is not None)
    with sock:
        asyncio.run(server.serve(sockets=[sock]))
