"""A small synchronous client of duro's HTTP API (docs/api.md); the ``duro`` CLI talks through it.

Each method calls one endpoint and returns its decoded JSON answer unchanged. A 4xx/5xx answer
raises :class:`ApiError`; a server that cannot be reached raises :class:`ServerUnreachable`.

    with DuroClient("http://127.0.0.1:8787") as client:
        run = client.start_run("place_call", {"call_id": "a", "to": "+34600000000"})["run"]
        print(client.get_run(run["id"])["steps"])
"""

from __future__ import annotations

import json
import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from duro import DuroError

__all__ = [
    "ApiError",
    "DuroClient",
    "ServerUnreachable",
    "Target",
    "TargetError",
    "agents_file_path",
    "resolve_target",
]

_UNSET: Any = object()


class ApiError(DuroError):
    """The server answered with an error (4xx or 5xx) and changed nothing.

    Attributes: ``status`` (the HTTP status), ``code`` (the body's ``error``, e.g. ``not_found`` or
    ``concurrency_limit``), ``message`` (the body's ``message``) and ``body`` (the whole decoded body;
    a 429 also carries ``workflow``, ``key``, ``limit`` and ``active`` there).
    """

    def __init__(self, status: int, code: str, message: str, body: Any = None) -> None:
        self.status = status
        self.code = code
        self.message = message
        self.body = body
        super().__init__(f"{message} (HTTP {status} {code})")

    def __reduce__(self) -> Any:
        return (type(self), (self.status, self.code, self.message, self.body))


class ServerUnreachable(DuroError):
    """No answer from the server at ``url``: connection refused, timed out or cut. ``reason`` says which."""

    def __init__(self, url: str, reason: str) -> None:
        self.url = url
        self.reason = reason
        super().__init__(f"the duro server at {url} is not answering ({reason})")

    def __reduce__(self) -> Any:
        return (type(self), (self.url, self.reason))


def _segment(value: str) -> str:
    """One path segment, percent-encoded (run ids, limit names and slot ids go into paths)."""
    return quote(str(value), safe="")


def _unreachable_reason(err: httpx.TransportError, timeout: float) -> str:
    if isinstance(err, httpx.TimeoutException):
        return f"no answer within {timeout:g}s"
    text = str(err) or type(err).__name__
    lowered = text.lower()
    if "refused" in lowered:
        return "connection refused"
    if "name or service not known" in lowered or "nodename nor servname" in lowered:
        return "unknown host"
    return text


class DuroClient:
    """Synchronous client of one duro installation (``duro dev``, ``duro serve``).

    ``base_url`` is the server's root (``http://127.0.0.1:8787``); ``token``, when set, is sent as
    ``Authorization: Bearer <token>``; ``timeout`` bounds each request in seconds. Use it as a context
    manager, or call :meth:`close`.
    """

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 10.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        headers = {b"Accept": b"application/json", b"User-Agent": b"duro-cli"}
        if token:
            headers[b"Authorization"] = f"Bearer {token}".encode()  # UTF-8, as the server compares it
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def __enter__(self) -> DuroClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    # -- transport ---------------------------------------------------------------------------------

    def _request(self, method: str, path: str, *, json: Any = _UNSET, params: Any = None) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"params": params}
        if json is not _UNSET:
            kwargs["json"] = json
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as err:
            raise ServerUnreachable(self.base_url, _unreachable_reason(err, self.timeout)) from None
        try:
            body = response.json()
        except ValueError:
            body = None
        if response.status_code >= 400:
            raise self._error(response, body)
        if not isinstance(body, dict):
            raise ApiError(
                response.status_code,
                "bad_response",
                f"{self.base_url}{path} did not answer with duro's JSON: is {self.base_url} a duro server?",
                body,
            )
        return body

    def _error(self, response: httpx.Response, body: Any) -> ApiError:
        status = response.status_code
        if isinstance(body, dict) and isinstance(body.get("message"), str):
            return ApiError(status, str(body.get("error") or f"http_{status}"), body["message"], body)
        first_line = (response.text.strip().splitlines() or [""])[0][:200]
        reason = response.reason_phrase or "error"
        message = f"the server answered {status} {reason}" + (f": {first_line}" if first_line else "")
        return ApiError(status, f"http_{status}", message, body)

    # -- installation ------------------------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        """``GET /api/health``: ``{"ok": true, "version": ...}``."""
        return self._request("GET", "/api/health")

    def status(self) -> dict[str, Any]:
        """``GET /api/status``: the project, database, last load and its error, reload count."""
        return self._request("GET", "/api/status")

    def openapi(self) -> dict[str, Any]:
        """``GET /api/openapi.json``: the API's OpenAPI description."""
        return self._request("GET", "/api/openapi.json")

    # -- workflows and runs ------------------------------------------------------------------------

    def workflows(self) -> dict[str, Any]:
        """``GET /api/workflows``: ``{"workflows": [Workflow...]}`` sorted by name."""
        return self._request("GET", "/api/workflows")

    def start_run(
        self,
        workflow: str,
        input: Any = None,
        *,
        run_id: str | None = None,
        concurrency: dict[str, Any] | None = None,
        version: str | None = None,
    ) -> dict[str, Any]:
        """``POST /api/workflows/{workflow}/runs``: ``{"run": Run, "created": bool}``. ``version``:
        a registered version of the workflow (default: the newest).

        ``concurrency`` is ``{"key": str or None, "limit": int}`` and replaces the workflow's quota for
        this start. A refused start raises :class:`ApiError` with status 429 (code ``concurrency_limit``).
        """
        body: dict[str, Any] = {"input": input}
        if run_id is not None:
            body["run_id"] = run_id
        if concurrency is not None:
            body["concurrency"] = concurrency
        if version is not None:
            body["version"] = version
        return self._request("POST", f"/api/workflows/{_segment(workflow)}/runs", json=body)

    def list_runs(
        self,
        *,
        workflow: str | None = None,
        status: str | Iterable[str] | None = None,
        tag: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> dict[str, Any]:
        """``GET /api/runs``: ``{"runs": [Run...], "next_cursor": str or None}``, newest first."""
        params: list[tuple[str, str]] = []
        if workflow is not None:
            params.append(("workflow", workflow))
        statuses = [status] if isinstance(status, str) else list(status or [])
        params.extend(("status", str(s)) for s in statuses)
        if tag is not None:
            params.append(("tag", tag))
        if limit is not None:
            params.append(("limit", str(limit)))
        if cursor is not None:
            params.append(("cursor", cursor))
        return self._request("GET", "/api/runs", params=params)

    def get_run(self, run_id: str, steps_limit: int | None = None) -> dict[str, Any]:
        """``GET /api/runs/{run_id}``: ``{"run": Run, "steps": [Step...], "next_steps_cursor": str |
        None}``, the steps' first page (200, or ``steps_limit``; more with :meth:`run_steps`)."""
        params = [] if steps_limit is None else [("steps_limit", str(steps_limit))]
        return self._request("GET", f"/api/runs/{_segment(run_id)}", params=params)

    def run_steps(self, run_id: str, cursor: str | None = None, limit: int | None = None) -> dict[str, Any]:
        """``GET /api/runs/{run_id}/steps``: ``{"steps": [Step...], "next_cursor": str | None}``, the
        page after ``cursor`` (a ``next_steps_cursor`` or ``next_cursor`` given before)."""
        params = [("cursor", cursor)] if cursor is not None else []
        if limit is not None:
            params.append(("limit", str(limit)))
        return self._request("GET", f"/api/runs/{_segment(run_id)}/steps", params=params)

    def get_run_whole(self, run_id: str) -> dict[str, Any]:
        """:meth:`get_run` with every step, read a page (1,000 steps) at a time."""
        answer = self.get_run(run_id, steps_limit=1000)
        cursor = answer.get("next_steps_cursor")
        while cursor is not None:
            page = self.run_steps(run_id, cursor, 1000)
            answer["steps"].extend(page["steps"])
            cursor = page["next_cursor"]
        answer["next_steps_cursor"] = None
        return answer

    def cancel_run(self, run_id: str) -> dict[str, Any]:
        """``POST /api/runs/{run_id}/cancel``: ``{"run": Run}`` (unfinished children are cancelled too)."""
        return self._request("POST", f"/api/runs/{_segment(run_id)}/cancel")

    def retry_run(self, run_id: str, version: str | None = None) -> dict[str, Any]:
        """``POST /api/runs/{run_id}/retry``: ``{"run": Run}`` (pending again, its attempt one more)."""
        body = {} if version is None else {"version": version}
        return self._request("POST", f"/api/runs/{_segment(run_id)}/retry", json=body)

    def fork_run(
        self, run_id: str, from_seq: int, new_run_id: str | None = None, version: str | None = None
    ) -> dict[str, Any]:
        """``POST /api/runs/{run_id}/fork``: ``{"run": Run}``, the new run."""
        body: dict[str, Any] = {"from_seq": from_seq}
        if new_run_id is not None:
            body["run_id"] = new_run_id
        if version is not None:
            body["version"] = version
        return self._request("POST", f"/api/runs/{_segment(run_id)}/fork", json=body)

    def bulk_runs(self, action: str, **body: Any) -> dict[str, Any]:
        """``POST /api/runs/retry`` or ``/api/runs/cancel`` (``action``) with a filter and ``dry_run``:
        ``{"report": {"run_ids", "refused", "dry_run"}}``. Filters left ``None`` are not sent."""
        given = {name: value for name, value in body.items() if value is not None}
        return self._request("POST", f"/api/runs/{action}", json=given)

    def prune_runs(self, older_than: str, dry_run: bool = False) -> dict[str, Any]:
        """``POST /api/runs/prune``: ``{"prune": {"runs", "steps", "slots", "dry_run", "before"}}``."""
        return self._request("POST", "/api/runs/prune", json={"older_than": older_than, "dry_run": dry_run})

    def signal(self, run_id: str, name: str, payload: Any = None) -> dict[str, Any]:
        """``POST /api/runs/{run_id}/signals/{name}`` with ``payload`` as the body: ``{"sent": true}``."""
        return self._request("POST", f"/api/runs/{_segment(run_id)}/signals/{_segment(name)}", json=payload)

    # -- limits and slots --------------------------------------------------------------------------

    def limits(self) -> dict[str, Any]:
        """``GET /api/limits``: ``{"limits": [Limit...]}`` sorted by name."""
        return self._request("GET", "/api/limits")

    def limit(self, name: str) -> dict[str, Any]:
        """``GET /api/limits/{name}``: ``{"limit": Limit}``."""
        return self._request("GET", f"/api/limits/{_segment(name)}")

    def slots(
        self, name: str, key: str | None = None, cursor: str | None = None, limit: int | None = None
    ) -> dict[str, Any]:
        """``GET /api/limits/{name}/slots[?key=K]``: ``{"limit": Limit, "slots": [Slot...],
        "next_cursor": str or None}``, held first (of key ``K`` alone, on a keyed limit), a page at a
        time (pass ``next_cursor`` back for the next)."""
        params = {"key": key, "cursor": cursor, "limit": limit}
        return self._request(
            "GET",
            f"/api/limits/{_segment(name)}/slots",
            params={k: v for k, v in params.items() if v is not None} or None,
        )

    def limit_history(self, name: str, minutes: int | None = None) -> dict[str, Any]:
        """``GET /api/limits/{name}/history``: ``{"points": [{"at", "busy", "waiting"}...]}``, oldest first.

        ``minutes`` is how far back to go (the server's default is 60)."""
        params = None if minutes is None else {"minutes": str(minutes)}
        return self._request("GET", f"/api/limits/{_segment(name)}/history", params=params)

    def release_slot(self, slot_id: str) -> dict[str, Any]:
        """``POST /api/slots/{slot_id}/release``: ``{"released": bool, "slot_id": str}``."""
        return self._request("POST", f"/api/slots/{_segment(slot_id)}/release")

    def set_capacity(self, name: str, capacity: int | None) -> dict[str, Any]:
        """``PUT /api/limits/{name}/capacity``: override the capacity (``None`` resets to the config)."""
        return self._request("PUT", f"/api/limits/{_segment(name)}/capacity", json={"capacity": capacity})

    def keys(self, name: str, limit: int = 50, search: str | None = None) -> dict[str, Any]:
        """``GET /api/limits/{name}/keys``: ``{"limit": Limit, "keys": [LimitKey...]}``, busiest first."""
        params: dict[str, Any] = {"limit": limit}
        if search is not None:
            params["search"] = search
        return self._request("GET", f"/api/limits/{_segment(name)}/keys", params=params)

    def set_key_capacity(self, name: str, key: str, capacity: int | None) -> dict[str, Any]:
        """``PUT /api/limits/{name}/keys/{key}/capacity``: one key's capacity (``None`` resets it)."""
        return self._request(
            "PUT", f"/api/limits/{_segment(name)}/keys/{_segment(key)}/capacity", json={"capacity": capacity}
        )

    def set_max_hold(self, name: str, max_hold: str | None) -> dict[str, Any]:
        """``PUT /api/limits/{name}/max-hold``: override max hold, e.g. ``"2h"`` (``None`` resets it)."""
        return self._request("PUT", f"/api/limits/{_segment(name)}/max-hold", json={"max_hold": max_hold})

    # -- schedules ---------------------------------------------------------------------------------

    def rates(self) -> dict[str, Any]:
        """``GET /api/rates``: ``{"rates": [Rate...]}``."""
        return self._request("GET", "/api/rates")

    def rate_waiters(self, name: str, key: str | None = None) -> dict[str, Any]:
        """``GET /api/rates/{name}/waiters``: ``{"rate": Rate, "waiters": [RateWaiter...]}``."""
        params = None if key is None else {"key": key}
        return self._request("GET", f"/api/rates/{_segment(name)}/waiters", params=params)

    def set_rate_limit(self, name: str, limit: int | None) -> dict[str, Any]:
        """``PUT /api/rates/{name}/limit``: override the limit (``None`` resets to the config)."""
        return self._request("PUT", f"/api/rates/{_segment(name)}/limit", json={"limit": limit})

    def pause_rate(self, name: str, duration: str, key: str | None = None) -> dict[str, Any]:
        """``POST /api/rates/{name}/pause``: no grant of the rate (or of ``key``) for ``duration``."""
        body: dict[str, Any] = {"duration": duration} if key is None else {"duration": duration, "key": key}
        return self._request("POST", f"/api/rates/{_segment(name)}/pause", json=body)

    def resume_rate(self, name: str, key: str | None = None) -> dict[str, Any]:
        """``POST /api/rates/{name}/resume``: end a pause of the rate (or of ``key``) now."""
        return self._request(
            "POST", f"/api/rates/{_segment(name)}/resume", json={} if key is None else {"key": key}
        )

    def schedules(self) -> dict[str, Any]:
        """``GET /api/schedules``: ``{"schedules": [Schedule...]}``."""
        return self._request("GET", "/api/schedules")

    def create_schedule(
        self,
        name: str,
        workflow: str,
        cron: str,
        input: Any = None,
        concurrency: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """``POST /api/schedules``: ``{"schedule": Schedule}``."""
        body: dict[str, Any] = {"name": name, "workflow": workflow, "cron": cron, "input": input}
        if concurrency is not None:
            body["concurrency"] = concurrency
        return self._request("POST", "/api/schedules", json=body)

    def delete_schedule(self, name: str) -> dict[str, Any]:
        """``DELETE /api/schedules/{name}``: ``{"deleted": true}``."""
        return self._request("DELETE", f"/api/schedules/{_segment(name)}")


# -- which installation to talk to ---------------------------------------------------------------

SERVER_FILE = Path(".duro") / "server.json"
AGENT_KEYS = ("url", "token_env")


class TargetError(DuroError):
    """The installation to talk to could not be determined; ``exit_code`` is what the CLI exits with.

    3 when no dev server is recorded for the project (there is nothing to talk to), 2 when the
    ``--agent`` argument or the agents file is wrong.
    """

    def __init__(self, message: str, exit_code: int) -> None:
        self.exit_code = exit_code
        super().__init__(message)

    def __reduce__(self) -> Any:
        return (type(self), (str(self), self.exit_code))


@dataclass(frozen=True)
class Target:
    """A resolved installation: where it is, the token to send, and how to talk about it in errors.

    ``description`` names it (``the dev server at http://127.0.0.1:8787``); ``unreachable_hint`` is
    what to check when it does not answer; ``token_hint`` what to do on a 401; ``pid`` and
    ``server_file`` are set for a local dev server.
    """

    url: str
    token: str | None
    description: str
    unreachable_hint: str
    token_hint: str
    project: Path | None = None
    server_file: Path | None = None
    pid: int | None = None


def agents_file_path(env: Mapping[str, str]) -> Path:
    """The user's agents file: ``$DURO_AGENTS_FILE``, else ``~/.config/duro/agents.toml``."""
    if env.get("DURO_AGENTS_FILE"):
        return Path(env["DURO_AGENTS_FILE"]).expanduser()
    home = Path(env["HOME"]) if env.get("HOME") else Path.home()
    return home / ".config" / "duro" / "agents.toml"


def _is_url(text: str) -> bool:
    return text.startswith(("http://", "https://"))


def _check_url(url: Any, where: str, exit_code: int) -> str:
    if not isinstance(url, str) or not _is_url(url) or not urlsplit(url).netloc:
        raise TargetError(f'{where} needs url = "http://HOST:PORT" (got {url!r})', exit_code)
    return url.rstrip("/")


def resolve_target(project: Path, agent: str | None, env: Mapping[str, str]) -> Target:
    """Decide which installation a CLI command talks to, from ``--project``, ``--agent`` and ``env``.

    Without ``agent``: the dev server that ``duro dev`` recorded in ``PROJECT/.duro/server.json``.
    With ``agent``: a URL (``http://…``/``https://…``), or a name defined in the agents file (see
    :func:`agents_file_path`) as ``[agents.NAME]`` with ``url`` and an optional ``token_env``. The
    token comes from the agent's ``token_env`` variable, else from ``DURO_TOKEN``. Raises
    :class:`TargetError` with a message that says what to do.
    """
    default_token = env.get("DURO_TOKEN") or None
    if agent is not None:
        if _is_url(agent):
            url = _check_url(agent, "--agent", 2)
            return Target(
                url=url,
                token=default_token,
                description=f"the server at {url}",
                unreachable_hint="is it running, and reachable from here?",
                token_hint="set DURO_TOKEN to the server's token",
            )
        return _named_agent(agent, env, default_token)
    return _dev_server(project, default_token)


def _dev_server(project: Path, token: str | None) -> Target:
    root = project.expanduser().resolve()
    server_file = root / SERVER_FILE
    no_server = f"no dev server found for {root}"
    if not root.is_dir():
        raise TargetError(
            f"{no_server} ({root} is not a directory): pass the project's directory with "
            f"--project DIR, or pass --agent URL",
            3,
        )
    try:
        text = server_file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise TargetError(
            f"{no_server} ({server_file} is missing){_servers_elsewhere(root)}start one with "
            f"`duro dev {root}`, or pass --agent URL",
            3,
        ) from None
    except OSError as err:
        raise TargetError(f"{no_server} ({server_file} cannot be read: {err.strerror})", 3) from None
    try:
        info = json.loads(text)
        if not isinstance(info, dict):
            raise ValueError("not a JSON object")
    except ValueError as err:
        raise TargetError(f"{server_file} is not valid ({err}): restart `duro dev {root}`", 3) from None
    url = _check_url(info.get("url"), str(server_file), 3)
    pid = info.get("pid") if isinstance(info.get("pid"), int) else None
    return Target(
        url=url,
        token=token,
        description=f"the dev server at {url}",
        unreachable_hint=f"is `duro dev` running in {root}?",
        token_hint="set DURO_TOKEN to the token it was started with",
        project=root,
        server_file=server_file,
        pid=pid,
    )


SKIPPED_DIRS = frozenset({".git", ".venv", "venv", "node_modules", "__pycache__", ".duro", ".tox"})


def _servers_below(root: Path, depth: int = 3) -> list[tuple[Path, str]]:
    """The dev servers running for projects in ``root``'s subdirectories (``depth`` levels down):
    each project's directory and URL, from its server file, when its process is alive."""
    found: list[tuple[Path, str]] = []
    level = [root]
    for _ in range(depth):
        below: list[Path] = []
        for directory in level:
            try:
                children = sorted(p for p in directory.iterdir() if p.is_dir() and p.name not in SKIPPED_DIRS)
            except OSError:
                continue
            for child in children:
                below.append(child)
                try:
                    info = json.loads((child / SERVER_FILE).read_text(encoding="utf-8"))
                except (OSError, ValueError):
                    continue
                url, pid = (info.get("url"), info.get("pid")) if isinstance(info, dict) else (None, None)
                if isinstance(url, str) and _is_url(url) and isinstance(pid, int) and _alive(pid):
                    found.append((child, url))
        level = below
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0
    return pid > 0


def _servers_elsewhere(root: Path) -> str:
    """What to say of dev servers running for projects below ``root``: which, and how to reach them."""
    running = _servers_below(root)
    if not running:
        return ": "
    project, url = running[0]
    where = project.relative_to(root)
    more = f" (and {len(running) - 1} more below {root})" if len(running) > 1 else ""
    return (
        f"; a dev server of project {project} is running at {url}{more}: pass --project {where} "
        f"(or run the command in {where}), or --agent {url}; or "
    )


def _named_agent(name: str, env: Mapping[str, str], default_token: str | None) -> Target:
    path = agents_file_path(env)
    example = f'[agents.{name}]\n  url = "http://HOST:8787"'
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise TargetError(
            f"unknown agent {name!r}: the agents file {path} does not exist; create it with\n"
            f"  {example}\nor pass --agent http://HOST:PORT",
            2,
        ) from None
    except (OSError, UnicodeDecodeError) as err:
        raise TargetError(f"the agents file {path} cannot be read ({err})", 2) from None
    except tomllib.TOMLDecodeError as err:
        raise TargetError(
            f"the agents file {path} is not valid TOML ({err}): fix it, or pass --agent URL", 2
        ) from None
    agents = data.get("agents", {})
    if not isinstance(agents, dict) or not all(isinstance(v, dict) for v in agents.values()):
        raise TargetError(
            f"the agents file {path} is malformed: each agent is a table such as\n  {example}", 2
        )
    if name not in agents:
        known = ", ".join(sorted(agents)) or "none"
        raise TargetError(
            f"unknown agent {name!r}: the agents file {path} defines {known}; add\n"
            f"  {example}\nor pass --agent http://HOST:PORT",
            2,
        )
    entry = agents[name]
    where = f"agent {name!r} in {path}"
    unknown = sorted(set(entry) - set(AGENT_KEYS))
    if unknown:
        raise TargetError(f"{where}: unknown key {unknown[0]!r} (an agent has {', '.join(AGENT_KEYS)})", 2)
    url = _check_url(entry.get("url"), where, 2)
    token_env = entry.get("token_env")
    token = default_token
    token_hint = "set DURO_TOKEN to the server's token"
    if token_env is not None:
        if not isinstance(token_env, str) or not token_env:
            raise TargetError(f"{where}: token_env must name an environment variable (got {token_env!r})", 2)
        token = env.get(token_env) or None
        if token is None:
            raise TargetError(f"{where} reads its token from ${token_env}, which is not set: export it", 2)
        token_hint = f"set ${token_env} to the server's token"
    return Target(
        url=url,
        token=token,
        description=f"agent {name!r} at {url}",
        unreachable_hint="is it running, and reachable from here?",
        token_hint=token_hint,
    )
