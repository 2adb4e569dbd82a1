"""The pages: overview, runs, one run, workflows, events, and the error pages."""

from __future__ import annotations

from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from perdure.api.auditing import OUTCOMES
from perdure.dashboard import chart, dag, query, runstate, timeline
from perdure.dashboard import format as fmt
from perdure.dashboard.data import RECENT_RUNS
from perdure.dashboard.security import principal_of
from perdure.dashboard.site import dashboard_of, is_fragment
from perdure.errors import ConfigurationError, DatabaseUnavailable, PerdureError, RunNotFound
from perdure.types import RunStatus

#: The audit page's filters (query parameters), as App.audit_log takes them.
AUDIT_FILTERS = ("actor", "action", "run", "outcome")
#: What an action's redirect says on the run page (?done=...).
DONE = {
    "cancel": "Run cancelled.",
    "retry": "Run queued again: it resumes at the step that failed.",
    "pause": "Run paused: no worker will claim it until it is resumed.",
    "resume": "Run resumed.",
    "signal": "Signal sent.",
    "fork": "Run forked: this is the new run.",
    "start": "Run started.",
}


def overview(request: Request) -> Response:
    """Activity chart, counts, queues, workers and schedules."""
    board = dashboard_of(request)
    picked = request.query_params.get("range", "1h")
    if picked not in chart.RANGES:
        picked = "1h"
    window, bucket = chart.RANGES[picked]
    now = fmt.now()
    since = chart.window_start(now, window, bucket)
    data = board.data.overview(since, bucket.total_seconds())
    context = {
        "page": "overview",
        "ranges": list(chart.RANGES),
        "picked": picked,
        "since": since,
        "data": data,
        "chart": chart.build(data.activity, since, bucket, now),
        "statuses": [s.value for s in RunStatus],
    }
    return board.render(request, "overview.html", context)


def runs(request: Request) -> Response:
    """The runs list: filter form, counts per status, one page of runs."""
    board = dashboard_of(request)
    asked = query.parse(request.query_params, fmt.now())
    try:
        page = board.data.runs_page(asked.filter, cursor=asked.cursor, limit=asked.limit)
    except ConfigurationError:
        if asked.cursor is None:
            raise
        # A cursor that no page gave out (edited, or cut short): the newest runs.
        asked.newest("the page cursor is not valid: showing the newest runs")
        page = board.data.runs_page(asked.filter, cursor=None, limit=asked.limit)
    context = {
        "page": "runs",
        "q": asked,
        "result": page,
        # The filter form is not part of a live refresh: skip its reads then.
        "options": None if is_fragment(request) else board.data.filter_options(),
        "ranges": list(query.RANGES),
        "sizes": query.PAGE_SIZES,
        "statuses": [s.value for s in RunStatus],
        "live": asked.cursor is None,
        "stranded": [] if is_fragment(request) else _stranded(board, asked.filter.workflow),
    }
    return board.render(request, "runs.html", context)


def _stranded(board: Any, workflow: str | None = None) -> list[Any]:
    """The stranded versions (of ``workflow`` only, when given) for the banner."""
    return [s for s in board.data.stranded() if workflow is None or s.workflow == workflow]


def run(request: Request) -> Response:
    """One run: record, actions, timeline, DAG, steps, signals, children, history."""
    return run_page(request, request.path_params["ref"])


def run_page(
    request: Request,
    ref: str,
    *,
    status: int = 200,
    problem: str | None = None,
    form: dict[str, str] | None = None,
) -> Response:
    """The page of run ``ref``, optionally with the error of a refused action."""
    board = dashboard_of(request)
    view = board.data.run_view(ref)
    payloads = principal_of(request).can("payloads")
    if not payloads:
        view = view.without_payloads()
    now = fmt.now()
    state = runstate.describe(view.run, view.steps, view.signals, now)
    done = DONE.get(request.query_params.get("done", ""))
    # Nothing continues a due run without a worker: say so, not "Signal sent."
    idle = state.due and not board.data.serving(view.run)
    if idle and request.query_params.get("done") == "signal":
        done = None
    context: dict[str, Any] = {
        "page": "runs",
        "view": view,
        "run": view.run,
        "timeline": timeline.build(
            view.run,
            view.steps,
            view.history,
            now,
            board.data.lost_workers(view.history),
            updates=view.updates,
            payloads=payloads,
        ),
        "dag": dag.layout(view.definition, view.steps),
        "done": done,
        "state": state,
        "idle": idle,
        "signalled": request.query_params.get("done") == "signal",
        "problem": problem,
        "form": form or {},
        "live": not view.run.status.is_final,
        "forkable": [s.name for s in view.steps if s.kind in ("step", "transaction")],
    }
    return board.render(request, "run.html", context, status=status)


def find(request: Request) -> Response:
    """Go to a run by id or key (the header's search box)."""
    ref = request.query_params.get("ref", "").strip()
    if not ref:
        return RedirectResponse(request.url_for("runs").path, status_code=303)
    found = dashboard_of(request).data.app.get_run(ref)
    return RedirectResponse(request.url_for("run", ref=found.id).path, status_code=303)


def workflows(request: Request) -> Response:
    """Registered workflow versions: kind, queue, counts per status, graphs drawn."""
    return workflows_page(request)


def workflows_page(
    request: Request,
    *,
    status: int = 200,
    problem: str | None = None,
    form: dict[str, str] | None = None,
) -> Response:
    """The workflows page, optionally with the error of a refused start or move, and the
    outcome of a move (``?moved=N&pinned=M``)."""
    board = dashboard_of(request)
    found = board.data.workflows()
    drawings = {(w.name, w.version): dag.layout(w.definition) for w in found}
    context = {
        "page": "workflows",
        "workflows": found,
        "drawings": drawings,
        "recent": RECENT_RUNS,
        "problem": problem,
        "form": form or {},
        "stranded": _stranded(board),
        "move_done": _move_done(request),
    }
    return board.render(request, "workflows.html", context, status=status)


def _move_done(request: Request) -> str | None:
    """The line saying what a move did, from the redirect's query (numbers only)."""
    moved, pinned = request.query_params.get("moved"), request.query_params.get("pinned")
    if moved is None or not moved.isdigit() or not (pinned or "0").isdigit():
        return None
    to = request.query_params.get("to", "")
    line = f"{int(moved)} run(s) moved to version {int(to) if to.isdigit() else '?'}"
    if pinned and int(pinned):
        line += f"; {int(pinned)} stay pinned (they recorded steps, or a worker holds them)"
    return line


#: The most audit entries one page shows.
AUDIT_PAGE = 200


def audit(request: Request) -> Response:
    """The audit record, newest first, filtered (admins only: 403 for other roles).

    Only admins see it: it names every token holder and proxy user, their
    addresses and what they did, which a viewer has no need to know.
    """
    principal = principal_of(request)
    if not principal.can("audit"):
        raise HTTPException(403, f"{principal.name} is a {principal.role}: the audit is for admins")
    board = dashboard_of(request)
    params = request.query_params
    filters = {name: (params.get(name) or "").strip() or None for name in AUDIT_FILTERS}
    if filters["outcome"] not in (None, *OUTCOMES):
        filters["outcome"] = None
    entries = board.data.app.audit_log(
        actor=filters["actor"],
        action=filters["action"],
        run=filters["run"],
        outcome=filters["outcome"],
        limit=AUDIT_PAGE,
    )
    context = {
        "page": "audit",
        "entries": entries,
        "filters": filters,
        "filtered": any(filters.values()),
        "outcomes": OUTCOMES,
        "limit": AUDIT_PAGE,
        "live": False,
    }
    return board.render(request, "audit.html", context)


def events(request: Request) -> Response:
    """The latest emitted events, with the runs each woke or started."""
    board = dashboard_of(request)
    context = {"page": "events", "events": board.data.events(), "live": False}
    return board.render(request, "events.html", context)


def login(request: Request) -> Response:
    """The login form (for a dashboard with a token)."""
    next_path = request.query_params.get("next", "/")
    return dashboard_of(request).render(request, "login.html", {"next": next_path, "failed": False})


def error_page(request: Request, status: int, title: str, message: str) -> Response:
    """An error page (or its plain text for a live refresh)."""
    context = {"page": "", "title": title, "message": message, "status": status}
    return dashboard_of(request).render(request, "error.html", context, status=status)


def _not_found(request: Request, exc: Exception) -> Response:
    return error_page(request, 404, "Not found", str(exc))


def _refused(request: Request, exc: Exception) -> Response:
    return error_page(request, 400, type(exc).__name__, str(exc))


def _unavailable(request: Request, exc: Exception) -> Response:
    return error_page(request, 503, "The database cannot be reached", str(exc))


def _http(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    return error_page(request, exc.status_code, f"Error {exc.status_code}", str(exc.detail))


HANDLERS: dict[Any, Any] = {
    RunNotFound: _not_found,
    DatabaseUnavailable: _unavailable,
    PerdureError: _refused,
    HTTPException: _http,
}


def routes() -> list[Route]:
    """The GET routes."""
    return [
        Route("/", overview, name="overview"),
        Route("/runs", runs, name="runs"),
        Route("/runs/{ref}", run, name="run"),
        Route("/find", find, name="find"),
        Route("/workflows", workflows, name="workflows"),
        Route("/audit", audit, name="audit"),
        Route("/events", events, name="events"),
        Route("/login", login, name="login", methods=["GET"]),
    ]
