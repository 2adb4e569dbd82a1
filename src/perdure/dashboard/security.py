"""Who may use the dashboard, and which POSTs are genuine.

- **Who.** With tokens configured, every request must carry one: an
  ``Authorization: Bearer`` header (for scripts), or the cookie the login form
  sets (for browsers). The cookie holds an HMAC of the token, never the token.
  With a trusted proxy, its user header names the user, from its addresses
  only. Each token and proxy user has a role (perdure.dashboard.roles).
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

from perdure.dashboard.config import DashboardConfig, is_loopback
from perdure.dashboard.roles import OPEN, NamedToken, Principal, ProxyAuth, match_token

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
    """Knows who sends a request, and signs and checks the dashboard's cookies.

    People are known by a named token (perdure.dashboard.roles: only the
    tokens' digests are held) sent as a Bearer header or set by the login
    form as a cookie (an HMAC of the token's name and digest with a
    per-process secret, never the token), or by an authenticating proxy's
    user header when the request comes from one of its addresses.
    """

    def __init__(
        self,
        tokens: tuple[NamedToken, ...] = (),
        proxy: ProxyAuth | None = None,
        secret: bytes | None = None,
    ) -> None:
        """Guard with ``tokens`` and ``proxy`` (neither: no authentication)."""
        self.tokens = tokens
        self.proxy = proxy
        self._secret = secret or secrets.token_bytes(32)

    @classmethod
    def of(cls, config: DashboardConfig) -> Guard:
        """The guard of ``config``'s tokens and proxy."""
        return cls(config.all_tokens, config.proxy)

    @property
    def required(self) -> bool:
        """Whether every request must say who sends it."""
        return bool(self.tokens) or self.proxy is not None

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

    def token_matches(self, candidate: str | None) -> NamedToken | None:
        """The named token ``candidate`` is (constant time), or None."""
        return match_token(self.tokens, candidate)

    def session_cookie(self, token: NamedToken | None = None) -> str:
        """The value of the cookie the login form sets: an HMAC of the token's name and digest.

        ``token`` defaults to the first one (``--token``'s, when given).
        """
        token = token or (self.tokens[0] if self.tokens else NamedToken("", "viewer", b""))
        return self._mac("session", f"{token.name}:{token.digest.hex()}")

    def _cookie_token(self, conn: HTTPConnection) -> NamedToken | None:
        cookie = conn.cookies.get(AUTH_COOKIE)
        if not cookie:
            return None
        found = None
        for token in self.tokens:
            if hmac.compare_digest(cookie, self.session_cookie(token)):
                found = token
        return found

    def bearer(self, conn: HTTPConnection) -> NamedToken | None:
        """The named token of the request's ``Authorization: Bearer`` header, or None."""
        scheme, _, value = conn.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer":
            return None
        return self.token_matches(value.strip())

    def from_proxy(self, conn: HTTPConnection) -> Principal | None:
        """The user a trusted proxy vouches for (its header from other addresses is ignored)."""
        if self.proxy is None:
            return None
        return self.proxy.principal(peer(conn), conn.headers)

    def identify(self, conn: HTTPConnection, *, cookie: bool = True) -> Principal | None:
        """Who sends the request: a trusted proxy's user, a token's holder, or None.

        Without authentication configured everyone is ``OPEN`` (an admin; the
        dashboard then serves loopback only). ``cookie``: accept the login
        form's cookie (the pages do; the API does not).
        """
        if not self.required:
            return OPEN
        user = self.from_proxy(conn)
        if user is not None:
            return user
        token = self.bearer(conn) or (self._cookie_token(conn) if cookie else None)
        return None if token is None else Principal(token.name, token.role, "token")

    def authenticated(self, conn: HTTPConnection) -> bool:
        """Whether the request may see the dashboard."""
        return self.identify(conn) is not None


def peer(conn: HTTPConnection) -> str | None:
    """The TCP peer's address (uvicorn is run without proxy headers: never a header's claim)."""
    client = conn.scope.get("client")
    return None if not client else str(client[0])


def principal_of(conn: HTTPConnection) -> Principal:
    """Who sent the request, as the gate found it (``OPEN`` if no gate ran)."""
    found = conn.scope.get("state", {}).get("principal")
    return found if isinstance(found, Principal) else OPEN


def set_principal(scope: Scope, principal: Principal) -> None:
    """Remember who sent the request, for the handlers and the audit record."""
    scope.setdefault("state", {})["principal"] = principal


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
