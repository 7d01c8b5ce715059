"""The dev server's guard (ASGI middleware): the Host, the token, cross-site requests, body size, framing.

- Every request must name this server in its ``Host``: ``localhost``, the address the request
  arrived on (the bound address; with ``--host 0.0.0.0``, whichever of the machine's addresses the
  client used), or a name allowed with ``--allow-host NAME`` (``*.example.com`` matches subdomains,
  ``*`` turns the check off). Any other Host gets 400: a page on ``rebind.evil.example`` whose name
  resolves to 127.0.0.1 is same-origin to the browser, and only the Host gives it away (DNS
  rebinding). In-process test clients use ``testserver`` both as the Host and as the address, so
  ``create_app(engine)`` serves them without configuration.
- With a token (required when binding anything but loopback), every ``/api/`` request (and
  ``/metrics``: a Prometheus scrape config sends it as ``authorization: {credentials: ...}``) needs
  ``Authorization: Bearer <token>`` or the ``duro_token`` cookie; opening ``/?token=<token>`` once
  sets the cookie for Studio. Tokens are compared as UTF-8 bytes, so any text works as a token and
  any bytes sent as one get a 401, never an error.
- A state-changing request whose ``Origin`` is not the server's own, or that a browser marks
  ``Sec-Fetch-Site: cross-site``, is refused: no page on another site can drive the API.
- A body announced larger than the limit is refused with 413 before it is read (a body sent
  without a length is counted as it arrives, see ``api._common.read_json``).
- Every answer says it may not be framed (``X-Frame-Options: DENY`` and the CSP
  ``frame-ancestors 'none'``): no other site can overlay Studio to trick a click.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Iterable
from urllib.parse import quote, unquote_to_bytes

from starlette.datastructures import Headers, MutableHeaders, QueryParams
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .api._common import MAX_BODY_BYTES, error_response

COOKIE = "duro_token"
_MUTATING = {"POST", "PUT", "PATCH", "DELETE"}
_NO_FRAMING = {"X-Frame-Options": "DENY", "Content-Security-Policy": "frame-ancestors 'none'"}


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback IP address (``127.0.0.0/8``, ``::1``); a name such as
    ``127.attacker.example`` is not."""
    if host.lower() == "localhost":
        return True
    address = _ip(host.removeprefix("[").removesuffix("]"))
    return address is not None and address.is_loopback


class Guard:
    def __init__(
        self,
        app: ASGIApp,
        token: str | None = None,
        allowed_hosts: Iterable[str] = (),
        max_body: int = MAX_BODY_BYTES,
    ) -> None:
        self.app = app
        self.token = token
        self._token = None if token is None else token.encode("utf-8")
        self.allowed_hosts = [_host_name(name) or _normal(name) for name in allowed_hosts]
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_unframed(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in _NO_FRAMING.items():
                    headers.setdefault(name, value)
            await send(message)

        refusal = self.check(scope)
        if refusal is not None:
            await refusal(scope, receive, send_unframed)
            return
        await self.app(scope, receive, send_unframed)

    def check(self, scope: Scope) -> Response | None:
        headers = Headers(scope=scope)
        path, method = scope["path"], scope["method"]
        host = headers.get("host", "")
        if not self._host_allowed(host, scope.get("server")):
            return error_response(400, _host_refusal(host))
        if self.token is not None:
            query = QueryParams(scope.get("query_string", b""))
            if path == "/" and "token" in query:
                return self._login(query.get("token", ""))
            if _guarded(path) and not self._authorized(headers):
                return error_response(
                    401,
                    "this server needs its token: send 'Authorization: Bearer <token>' "
                    "(the CLI reads DURO_TOKEN), or open /?token=<token> once in the browser",
                )
        if method in _MUTATING:
            origin = headers.get("origin")
            if headers.get("sec-fetch-site") == "cross-site" or (
                origin is not None and origin != _own_origin(scope)
            ):
                return error_response(
                    403,
                    f"cross-site request refused: {method} {path} from origin "
                    f"{json.dumps(origin)}; use Studio or the CLI on this server",
                )
        length = headers.get("content-length", "").strip()
        if length.isascii() and length.isdigit() and int(length) > self.max_body:
            return error_response(
                413, f"the request body is {length} bytes; the limit is {self.max_body} bytes"
            )
        return None

    def _host_allowed(self, host: str, server: tuple[str, int | None] | None) -> bool:
        name = _host_name(host)
        if name is None:
            return False
        if name == "localhost" or (server is not None and _same_address(name, server[0])):
            return True
        for allowed in self.allowed_hosts:
            if allowed == "*" or name == allowed or (allowed.startswith("*.") and name.endswith(allowed[1:])):
                return True
            if _same_address(name, allowed):
                return True
        return False

    def _authorized(self, headers: Headers) -> bool:
        assert self._token is not None
        # header values arrive as bytes that Starlette decoded as latin-1: encoding back gives them
        given = headers.get("authorization", "").encode("latin-1")
        if given[:7].lower() == b"bearer " and hmac.compare_digest(given[7:].strip(), self._token):
            return True
        cookie = _cookie(headers.get("cookie", ""), COOKIE)
        return cookie is not None and hmac.compare_digest(
            unquote_to_bytes(cookie.encode("latin-1")), self._token
        )

    def _login(self, given: str) -> Response:
        assert self.token is not None and self._token is not None
        if not hmac.compare_digest(given.encode("utf-8"), self._token):
            return error_response(401, "wrong token; ask whoever started the server for DURO_TOKEN")
        response = RedirectResponse("/", status_code=303)
        # percent-encoded: a cookie value is ASCII without quotes, separators or spaces
        response.set_cookie(COOKIE, quote(self.token, safe=""), httponly=True, samesite="strict")
        return response


def _guarded(path: str) -> bool:
    """The paths that need the token when one is set: the API and the metrics."""
    return path.startswith(("/api/", "/metrics/")) or path == "/metrics"


def _host_refusal(host: str) -> str:
    shown = host if len(host) <= 100 else host[:100] + "…"
    if not host:
        return "the request has no Host header; send the address you reach this server at"
    name = _host_name(host) or shown
    return (
        f"this server does not answer to the host {json.dumps(shown)} (a guard against DNS rebinding: it "
        f"accepts localhost, its own address and names allowed at start); if that is how you reach it, "
        f"start it with --allow-host {name}"
    )


def _host_name(host: str) -> str | None:
    """The name in a ``Host`` header, without its port, lower-case (``[::1]:8787`` → ``::1``);
    ``None`` when it is not a host at all."""
    host = host.strip()
    if host.startswith("["):
        name, bracket, rest = host[1:].partition("]")
        port_ok = bracket and (
            rest == "" or (rest.startswith(":") and rest[1:].isascii() and rest[1:].isdigit())
        )
        return _normal(name) if port_ok and name else None
    name, colon, port = host.rpartition(":")
    if not colon:
        name = host
    elif not (port.isascii() and port.isdigit()) or ":" in name:
        return None
    return _normal(name) if name else None


def _normal(name: str) -> str:
    return name.strip().removeprefix("[").removesuffix("]").lower()


def _ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        address = ipaddress.ip_address(text.split("%", 1)[0])
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address


def _same_address(name: str, address: str) -> bool:
    """``name`` (from a Host) is ``address`` (the one a request arrived on, or an allowed one):
    the same text, or the same IP address however spelled."""
    if name == address.lower():
        return True
    ours, theirs = _ip(name), _ip(address)
    return ours is not None and ours == theirs


def _own_origin(scope: Scope) -> str:
    headers = Headers(scope=scope)
    host = headers.get("host", "")
    return f"{scope.get('scheme', 'http')}://{host}"


def _cookie(header: str, name: str) -> str | None:
    for part in header.split(";"):
        key, _, value = part.strip().partition("=")
        if key == name:
            return value
    return None
