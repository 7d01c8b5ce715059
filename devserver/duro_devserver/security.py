"""The dev server's guard (ASGI middleware): the token, cross-site requests, and body size.

- With a token (required when binding anything but loopback), every ``/api/`` request needs
  ``Authorization: Bearer <token>`` or the ``duro_token`` cookie; opening ``/?token=<token>`` once
  sets the cookie for Studio.
- A state-changing request whose ``Origin`` is not the server's own, or that a browser marks
  ``Sec-Fetch-Site: cross-site``, is refused: no page on another site can drive the API.
- A body announced larger than the limit is refused with 413 before it is read (a body sent
  without a length is measured as it is read, see ``api._common.read_json``).
"""

from __future__ import annotations

import hmac
import json

from starlette.datastructures import Headers, QueryParams
from starlette.responses import RedirectResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .api._common import MAX_BODY_BYTES, error_response

COOKIE = "duro_token"
LOOPBACK = {"127.0.0.1", "::1", "localhost"}
_MUTATING = {"POST", "PUT", "PATCH", "DELETE"}


def is_loopback(host: str) -> bool:
    return host in LOOPBACK or host.startswith("127.")


class Guard:
    def __init__(self, app: ASGIApp, token: str | None = None, max_body: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.token = token
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.check(scope)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def check(self, scope: Scope) -> Response | None:
        headers = Headers(scope=scope)
        path, method = scope["path"], scope["method"]
        if self.token is not None:
            query = QueryParams(scope.get("query_string", b""))
            if path == "/" and "token" in query:
                return self._login(query.get("token", ""))
            if path.startswith("/api/") and not self._authorized(headers):
                return error_response(401, "this server needs its token: send 'Authorization: Bearer <token>' "
                                           "(the CLI reads DURO_TOKEN), or open /?token=<token> once in the browser")
        if method in _MUTATING:
            origin = headers.get("origin")
            if headers.get("sec-fetch-site") == "cross-site" or (origin is not None and origin != _own_origin(scope)):
                return error_response(403, f"cross-site request refused: {method} {path} from origin "
                                           f"{json.dumps(origin)}; use Studio or the CLI on this server")
            length = headers.get("content-length")
            if length is not None and length.isdigit() and int(length) > self.max_body:
                return error_response(413, f"the request body is {length} bytes; the limit is {self.max_body} bytes")
        return None

    def _authorized(self, headers: Headers) -> bool:
        assert self.token is not None
        given = headers.get("authorization", "")
        if given.lower().startswith("bearer ") and hmac.compare_digest(given[7:].strip(), self.token):
            return True
        cookie = _cookie(headers.get("cookie", ""), COOKIE)
        return cookie is not None and hmac.compare_digest(cookie, self.token)

    def _login(self, given: str) -> Response:
        assert self.token is not None
        if not hmac.compare_digest(given, self.token):
            return error_response(401, "wrong token; ask whoever started the server for DURO_TOKEN")
        response = RedirectResponse("/", status_code=303)
        response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict")
        return response


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
