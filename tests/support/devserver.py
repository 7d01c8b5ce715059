"""A real ``duro dev`` (or ``duro serve``) process for end-to-end tests: started on a free port,
found through the ``.duro/server.json`` it writes, stopped with SIGTERM (then SIGKILL) afterwards."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.support.waiting import wait_until

START_TIMEOUT = 30.0


@dataclass
class DevServer:
    url: str
    project: Path
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def client(self, **kwargs: object) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=10.0, **kwargs)  # type: ignore[arg-type]


def _server_file(project: Path) -> Path:
    return project / ".duro" / "server.json"


@contextmanager
def running_dev_server(
    project: Path,
    *,
    command: str = "dev",
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    host: str = "127.0.0.1",
) -> Iterator[DevServer]:
    """Start ``duro COMMAND PROJECT --port 0 ARGS`` and yield it once it answers ``/api/health``."""
    project = Path(project).resolve()
    info = _server_file(project)
    info.unlink(missing_ok=True)
    log_path = project / ".duro" / f"{command}-server.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "duro_devserver",
                command,
                str(project),
                "--port",
                "0",
                "--host",
                host,
                *args,
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
        )
    try:

        def ready() -> str | None:
            if process.poll() is not None:
                raise AssertionError(
                    f"duro {command} exited with {process.returncode}:\n{log_path.read_text()}"
                )
            try:
                data = json.loads(info.read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                return None
            return data["url"] if data.get("pid") == process.pid else None

        url = wait_until(ready, START_TIMEOUT, f"duro {command} to write {info}")
        server = DevServer(url=url, project=project, process=process, log_path=log_path)
        yield server
    finally:
        stop(process)


def stop(process: subprocess.Popen[bytes], timeout: float = 15.0) -> int:
    """SIGTERM (a graceful stop), then SIGKILL if it does not end within ``timeout``."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    return process.returncode
