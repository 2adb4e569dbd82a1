"""Recording what the dashboard's and the API's callers did (or were refused) in the audit record.

Each state-changing request writes one entry through ``App.record_audit``
before its answer is sent: who (the principal), from where (the TCP peer;
behind a trusted proxy, the client its ``X-Forwarded-For`` names, then the
proxy), what, which runs and the outcome. Never a token, never a payload.
A failure to write the entry is logged and does not change the answer: the
action has already happened by then.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import Any

from starlette.requests import HTTPConnection

from perdure.api.app import App
from perdure.dashboard.roles import Principal, ProxyAuth
from perdure.dashboard.security import ASGIApp, Message, Receive, Scope, Send, peer
from perdure.errors import PerdureError

log = logging.getLogger("perdure.dashboard.audit")

#: The most response body kept to read an error's code from.
_MAX_ERROR_BODY = 16_384


def address_of(conn: HTTPConnection, proxy: ProxyAuth | None) -> str | None:
    """Where the request came from: the peer, or behind a trusted proxy the client it names."""
    address = peer(conn)
    if proxy is not None and proxy.trusts(address):
        forwarded = conn.headers.get("x-forwarded-for", "").split(",")[-1].strip()
        if forwarded and len(forwarded) <= 100 and forwarded.isprintable():
            return f"{forwarded} via {address}"
    return address


async def record(
    app: App,
    principal: Principal,
    *,
    source: str,
    address: str | None,
    action: str,
    outcome: str,
    runs: Sequence[str] = (),
    detail: dict[str, Any] | None = None,
) -> None:
    """Append one entry; a failure to write it is logged, not raised."""
    try:
        await app.record_audit_async(
            actor=principal.name,
            via=principal.via,
            role=principal.role,
            source=source,
            address=address,
            action=action,
            runs=list(runs),
            outcome=outcome,
            detail=detail,
        )
    except (PerdureError, OSError) as exc:
        log.warning(
            "could not record %s by %s in the audit record: %s", action, principal.name, exc
        )


def api_action(method: str, path: str) -> tuple[str, list[str]]:
    """The action and runs a state-changing API request names, from its path under the prefix.

    ``POST /runs`` is ``start``; ``POST /runs/{ref}/signals`` is ``signal``,
    ``POST /runs/{ref}/updates`` ``update``;
    ``POST /runs/{ref}/<verb>`` is ``<verb>``.
    """
    parts = [p for p in path.split("/") if p]
    if parts == ["runs"]:
        return "start", []
    if len(parts) == 3 and parts[0] == "runs":
        verb = {"signals": "signal", "updates": "update"}.get(parts[2], parts[2])
        return verb[:40], [parts[1][:200]]
    return f"{method.lower()} {'/'.join(parts)}"[:80], []


class AuditedResponse:
    """Wraps ``send``: records the entry of a state-changing API call before its answer leaves.

    The outcome is ``ok`` for a 2xx, ``refused`` for a 403 and ``error``
    otherwise (with the problem's ``code``); a new run's id is read from
    the ``location`` header of a start.
    """

    def __init__(
        self,
        app: App,
        principal: Principal,
        address: str | None,
        action: str,
        runs: list[str],
        send: Send,
    ) -> None:
        """Record ``action`` on ``runs`` by ``principal`` from ``address``; answer by ``send``."""
        self.app = app
        self.principal = principal
        self.address = address
        self.action = action
        self.runs = runs
        self._send = send
        self._start: Message | None = None
        self._body = b""

    async def __call__(self, message: Message) -> None:
        """Hold the answer of an error until its body is read, then record and send it."""
        if message["type"] == "http.response.start":
            status = int(message["status"])
            if status < 400:
                runs = self.runs or self._created(message)
                await self._record("ok", runs, None)
                await self._send(message)
                return
            self._start = message
            return
        if self._start is not None and message["type"] == "http.response.body":
            self._body += message.get("body", b"")[:_MAX_ERROR_BODY]
            if message.get("more_body", False):
                return
            status = int(self._start["status"])
            outcome = "refused" if status == 403 else "error"
            await self._record(outcome, self.runs, {"status": status, **self._code()})
            start, self._start = self._start, None
            await self._send(start)
            await self._send({"type": "http.response.body", "body": self._body})
            return
        await self._send(message)

    def _created(self, message: Message) -> list[str]:
        for name, value in message.get("headers", []):
            if name.lower() == b"location":
                return [value.decode("latin-1").rstrip("/").rsplit("/", 1)[-1][:200]]
        return []

    def _code(self) -> dict[str, Any]:
        try:
            body = json.loads(self._body)
        except ValueError:
            return {}
        if isinstance(body, dict) and isinstance(body.get("code"), str):
            return {"code": body["code"], "message": str(body.get("detail", ""))[:300]}
        return {}

    async def _record(self, outcome: str, runs: list[str], detail: dict[str, Any] | None) -> None:
        await record(
            self.app,
            self.principal,
            source="api",
            address=self.address,
            action=self.action,
            outcome=outcome,
            runs=runs,
            detail=detail,
        )


async def audited(
    inner: ASGIApp,
    app: App,
    principal: Principal,
    address: str | None,
    scope: Scope,
    receive: Receive,
    send: Send,
) -> None:
    """Serve a state-changing API request through ``inner``, recording its entry."""
    action, runs = api_action(scope["method"], scope["path"][len(scope.get("root_path", "")) :])
    wrapped = AuditedResponse(app, principal, address, action, runs, send)
    await inner(scope, receive, wrapped)
