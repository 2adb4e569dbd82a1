"""Who may use the dashboard, and which POSTs are genuine.

- **Token.** With a token configured, every request must carry it: an
  ``Authorization: Bearer`` header (for scripts), or the cookie the login form
  sets (for browsers). The cookie holds an HMAC of the token, never the token.
- **CSRF.** A double-submit token: a signed random value in a SameSite=Strict
  cookie, repeated in a hidden field of every form. A POST whose field is
  missing, differs from the cookie or carries a bad signature gets 403. A
  request authenticated by a Bearer header is not a browser's and needs none.
- **Origin.** A POST whose Origin header names another site gets 403.
- **Host.** Without a token, a request whose Host header is not a loopback
  name or address gets 400: a web page cannot reach the dashboard by pointing
  a DNS name of its own at 127.0.0.1 (DNS rebinding).
- **Headers.** A Content-Security-Policy that allows scripts, styles and images
  from the dashboard itself only (no inline script), and no framing.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from starlette.datastructures import Headers
from starlette.requests import HTTPConnection, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from perdure.dashboard.config import is_loopback

CSRF_COOKIE = "perdure_csrf"
CSRF_FIELD = "csrf"
AUTH_COOKIE = "perdure_auth"

CSP = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "form-action 'self'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "object-src 'none'",
    ]
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Guard:
    """Signs and checks the dashboard's cookies and tokens with a per-process secret."""

    def __init__(self, token: str | None, secret: bytes | None = None) -> None:
        """Guard with ``token`` (None: no authentication); ``secret`` signs cookies."""
        self.token = token
        self._secret = secret or secrets.token_bytes(32)

    def _mac(self, purpose: str, value: str) -> str:
        return hmac.new(self._secret, f"{purpose}:{value}".encode(), hashlib.sha256).hexdigest()

    # CSRF -------------------------------------------------------------------------

    def new_csrf(self) -> str:
        """A fresh CSRF token: a random nonce and its signature."""
        nonce = secrets.token_urlsafe(18)
        return f"{nonce}.{self._mac('csrf', nonce)}"

    def csrf_signed(self, token: str | None) -> bool:
        """Whether ``token`` is one this guard issued."""
        if not token or "." not in token:
            return False
        nonce, _, mac = token.partition(".")
        return hmac.compare_digest(mac, self._mac("csrf", nonce))

    def csrf_ok(self, cookie: str | None, submitted: str | None) -> bool:
        """A genuine form post: the field equals the cookie, and the cookie is signed."""
        if not cookie or not submitted or not self.csrf_signed(cookie):
            return False
        return hmac.compare_digest(cookie.encode(), submitted.encode())

    # Authentication ---------------------------------------------------------------

    def token_matches(self, candidate: str | None) -> bool:
        """Whether ``candidate`` is the configured token (constant time)."""
        if self.token is None or not candidate:
            return False
        return hmac.compare_digest(candidate.encode(), self.token.encode())

    def session_cookie(self) -> str:
        """The value of the cookie the login form sets: an HMAC of the token."""
        return self._mac("session", self.token or "")

    def bearer(self, conn: HTTPConnection) -> bool:
        """Whether the request carries the token in an ``Authorization: Bearer`` header."""
        scheme, _, value = conn.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and self.token_matches(value.strip())

    def authenticated(self, conn: HTTPConnection) -> bool:
        """Whether the request may see the dashboard."""
        if self.token is None or self.bearer(conn):
            return True
        cookie = conn.cookies.get(AUTH_COOKIE)
        return bool(cookie) and hmac.compare_digest(cookie or "", self.session_cookie())


def same_origin(request: Request) -> bool:
    """False when the request's Origin header names a site other than this one."""
    origin = request.headers.get("origin")
    if not origin or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == request.headers.get("host", "")


class SecurityHeaders:
    """ASGI middleware adding the CSP and its companions to every response."""

    def __init__(self, app: ASGIApp) -> None:
        """Wrap ``app``."""
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Add the headers to the response start of HTTP requests."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers)


class LoopbackHostOnly:
    """ASGI middleware: refuse (400) a request whose Host is not localhost, 127.x or ::1."""

    def __init__(self, app: ASGIApp) -> None:
        """Wrap ``app``."""
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass requests addressed to a loopback name; answer 400 to the others."""
        if scope["type"] == "http":
            host = Headers(scope=scope).get("host", "")
            name = urlsplit(f"//{host}").hostname or ""
            if not is_loopback(name):
                response: Response = PlainTextResponse("400 Bad Request: invalid Host header", 400)
                if scope["path"].startswith("/api/"):
                    # The HTTP API answers every refusal as a problem document.
                    detail = "invalid Host header: without a token only loopback names are served"
                    body: dict[str, object] = {"type": "urn:perdure:problem:invalid-host"}
                    body |= {"title": "Bad Request", "status": 400, "code": "invalid-host"}
                    body["detail"] = detail
                    response = JSONResponse(body, 400, media_type="application/problem+json")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
