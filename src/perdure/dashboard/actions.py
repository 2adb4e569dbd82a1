"""The POST routes: actions on runs, login and logout.

Each action checks, in order: read-only mode (403), the Origin header (403),
the CSRF token (403) and the role (403: viewers may not act); then it calls
the same App method the CLI calls, through ``DashboardData``. A refused
action (a run in the wrong state, a payload that is not JSON) shows the run
page again with the reason, and changes nothing. Every action, refused or
not, is recorded in the audit record (``perdure.dashboard.audit_trail``).
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from perdure.dashboard import audit_trail
from perdure.dashboard.data import DashboardData
from perdure.dashboard.pages import run_page, workflows_page
from perdure.dashboard.security import (
    AUTH_COOKIE,
    CSRF_COOKIE,
    CSRF_FIELD,
    principal_of,
    same_origin,
)
from perdure.dashboard.site import Dashboard, dashboard_of, set_cookie
from perdure.errors import InvalidRunState, PerdureError, RunNotFound

#: Each action: what it calls, given the data, the run and the form's fields.
ACTIONS: dict[str, Callable[[DashboardData, str, dict[str, str]], object]] = {
    "cancel": lambda data, ref, form: data.cancel(ref, form.get("reason", "")),
    "retry": lambda data, ref, form: data.retry(ref),
    "pause": lambda data, ref, form: data.pause(ref),
    "resume": lambda data, ref, form: data.resume(ref),
    "signal": lambda data, ref, form: data.signal(
        ref, form.get("name", ""), form.get("payload", ""), form.get("key") or None
    ),
    "fork": lambda data, ref, form: data.fork(ref, form.get("step", "")),
}


def check_post(board: Dashboard, request: Request, form: FormData) -> None:
    """Refuse (403) a POST from another site or without the form's CSRF token.

    A request that carries the token in an Authorization header comes from a
    script, not from a browser tricked by another site: it needs no CSRF token.
    """
    if not same_origin(request):
        raise HTTPException(403, "this request comes from another site")
    if board.guard.required and board.guard.bearer(request) is not None:
        return
    submitted = form.get(CSRF_FIELD)
    field = submitted if isinstance(submitted, str) else None
    if not board.guard.csrf_ok(request.cookies.get(CSRF_COOKIE), field):
        raise HTTPException(
            403, "the form's CSRF token is missing or wrong: reload the page and try again"
        )


async def checked_post(
    board: Dashboard, request: Request, form: FormData, action: str, runs: list[str]
) -> None:
    """``check_post``, recording a refusal (another site, no CSRF token) in the audit record."""
    try:
        check_post(board, request, form)
    except HTTPException as exc:
        await audit(request, action, "refused", runs, {"status": 403, "why": str(exc.detail)})
        raise


async def audit(
    request: Request,
    action: str,
    outcome: str,
    runs: list[str],
    detail: dict[str, object] | None = None,
) -> None:
    """Record ``action`` by the request's sender in the audit record."""
    board = dashboard_of(request)
    await audit_trail.record(
        board.data.app,
        principal_of(request),
        source="dashboard",
        address=audit_trail.address_of(request, board.guard.proxy),
        action=action,
        outcome=outcome,
        runs=runs,
        detail=detail,
    )


async def check_role(request: Request, action: str, runs: list[str]) -> None:
    """Refuse (403, recorded) an action by a role that may not act."""
    principal = principal_of(request)
    if not principal.can("act"):
        await audit(request, action, "refused", runs, {"status": 403, "role": principal.role})
        raise HTTPException(
            403, f"{principal.name} is a {principal.role}: this role may not change runs"
        )


def _details(action: str, fields: dict[str, str]) -> dict[str, object] | None:
    """What the entry of ``action`` keeps of its form: names, never payloads."""
    if action == "signal":
        return {"name": fields.get("name", "")}
    if action == "fork":
        return {"step": fields.get("step", "")}
    return None


async def act(request: Request) -> Response:
    """Run one action on a run, then go back to its page (or the new run's, for a fork)."""
    board = dashboard_of(request)
    action = request.path_params["action"]
    ref = request.path_params["ref"]
    if board.config.read_only:
        await audit(request, action[:40], "refused", [ref], {"status": 403, "why": "read-only"})
        raise HTTPException(403, "this dashboard is read-only")
    if action not in ACTIONS:
        raise HTTPException(404, f"no action {action!r}")
    form = await request.form()
    await checked_post(board, request, form, action, [ref])
    await check_role(request, action, [ref])
    fields = {k: v for k, v in form.items() if isinstance(v, str) and k != CSRF_FIELD}
    detail = _details(action, fields)
    try:
        result = await run_in_threadpool(ACTIONS[action], board.data, ref, fields)
    except PerdureError as exc:
        await audit(request, action, "error", [ref], {**(detail or {}), "error": str(exc)})
        if isinstance(exc, RunNotFound):
            raise
        status = 409 if isinstance(exc, InvalidRunState) else 400
        problem = f"{action} refused: {exc}"
        return await run_in_threadpool(
            run_page, request, ref, status=status, problem=problem, form=fields
        )
    runs = [ref, result] if action == "fork" and isinstance(result, str) else [ref]
    await audit(request, action, "ok", runs, detail)
    target = result if action == "fork" and isinstance(result, str) else ref
    url = request.url_for("run", ref=target).path
    return RedirectResponse(f"{url}?done={action}", status_code=303)


async def start(request: Request) -> Response:
    """Start a run of a workflow version from its page, then go to the new run's page.

    A refused start (input that is not JSON, an unknown version) shows the
    workflows page again with the reason and what was typed; nothing is written.
    """
    board = dashboard_of(request)
    name = request.path_params["name"]
    version = request.path_params["version"]
    detail: dict[str, object] = {"workflow": f"{name}@{version}"}
    if board.config.read_only:
        await audit(request, "start", "refused", [], {**detail, "status": 403})
        raise HTTPException(403, "this dashboard is read-only")
    form = await request.form()
    await checked_post(board, request, form, "start", [])
    await check_role(request, "start", [])
    fields = {k: v for k, v in form.items() if isinstance(v, str) and k != CSRF_FIELD}
    try:
        run_id = await run_in_threadpool(
            board.data.start,
            name,
            version,
            fields.get("input", ""),
            fields.get("key", ""),
            fields.get("queue", ""),
        )
    except PerdureError as exc:
        await audit(request, "start", "error", [], {**detail, "error": str(exc)})
        return await run_in_threadpool(
            workflows_page,
            request,
            status=400,
            problem=f"start refused: {exc}",
            form={**fields, "workflow": f"{name}@{version}"},
        )
    await audit(request, "start", "ok", [run_id], detail)
    url = request.url_for("run", ref=run_id).path
    return RedirectResponse(f"{url}?done=start", status_code=303)


async def move(request: Request) -> Response:
    """Move the runs of a workflow version no live worker serves that recorded nothing yet
    to the version the form names (``perdure runs move-version``), then show the
    workflows page with what moved and what stays pinned. Operators and admins only;
    audited as ``move-version`` with the runs moved."""
    board = dashboard_of(request)
    name = request.path_params["name"]
    version = request.path_params["version"]
    detail: dict[str, object] = {"workflow": f"{name}@{version}"}
    if board.config.read_only:
        await audit(request, "move-version", "refused", [], {**detail, "status": 403})
        raise HTTPException(403, "this dashboard is read-only")
    form = await request.form()
    await checked_post(board, request, form, "move-version", [])
    await check_role(request, "move-version", [])
    to_text = form.get("to")
    to_text = to_text if isinstance(to_text, str) else ""
    detail["to"] = to_text[:20]
    try:
        result = await run_in_threadpool(board.data.move_runs, name, version, to_text)
    except PerdureError as exc:
        await audit(request, "move-version", "error", [], {**detail, "error": str(exc)})
        return await run_in_threadpool(
            workflows_page, request, status=400, problem=f"move refused: {exc}"
        )
    await audit(
        request,
        "move-version",
        "ok",
        result.moved,
        {**detail, "pinned": len(result.skipped)},
    )
    url = request.url_for("workflows").path
    query = f"moved={result.count}&pinned={len(result.skipped)}&to={result.to_version}"
    return RedirectResponse(f"{url}?{query}#wf-{name}-{version}", status_code=303)


async def login(request: Request) -> Response:
    """Check the token typed in the login form; on success set the session cookie."""
    board = dashboard_of(request)
    form = await request.form()
    check_post(board, request, form)
    typed = form.get("token")
    next_path = _local(str(form.get("next") or "/"))
    token = board.guard.token_matches(typed if isinstance(typed, str) else None)
    if token is None:
        context = {"next": next_path, "failed": True}
        return board.render(request, "login.html", context, status=401)
    response = RedirectResponse(next_path, status_code=303)
    set_cookie(request, response, AUTH_COOKIE, board.guard.session_cookie(token))
    return response


async def logout(request: Request) -> Response:
    """Forget the session cookie."""
    board = dashboard_of(request)
    check_post(board, request, await request.form())
    response = RedirectResponse(request.url_for("login").path, status_code=303)
    response.delete_cookie(AUTH_COOKIE, path="/")
    return response


def _local(path: str) -> str:
    """``path`` if it is a path on this site, else ``/`` (no open redirect)."""
    parts = urlsplit(path)
    if parts.scheme or parts.netloc or not path.startswith("/") or path[1:2] in ("/", "\\"):
        return "/"
    return path


def routes() -> list[Route]:
    """The POST routes."""
    return [
        Route("/runs/{ref}/{action}", act, methods=["POST"], name="act"),
        Route("/workflows/{name}/{version:int}/start", start, methods=["POST"], name="start"),
        Route("/workflows/{name}/{version:int}/move", move, methods=["POST"], name="move"),
        Route("/login", login, methods=["POST"], name="login_post"),
        Route("/logout", logout, methods=["POST"], name="logout"),
    ]
