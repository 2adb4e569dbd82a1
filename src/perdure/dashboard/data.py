"""Everything the dashboard reads and does, through the library's public calls only.

This is the one module between the pages and perdure: it calls
[`perdure.App`][perdure.App] methods (the same ones the CLI calls) and returns plain
data for the templates. No SQL here, no engine, no store. When the library
gains richer calls (more list_runs filters, queue ages, schedules, fork), this
module is where they are swapped in; optional ones are looked up at run time,
so a page shows a feature as soon as the library offers it.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from perdure.api import replica
from perdure.api.app import App
from perdure.api.filters import RunFilter
from perdure.dashboard import redact
from perdure.dashboard.api.limits import json_depth
from perdure.engine.serialization import MAX_DEPTH
from perdure.errors import ConfigurationError, DatabaseUnavailable
from perdure.types import (
    HistoryEvent,
    MovedRuns,
    QueueInfo,
    Run,
    Step,
    StrandedVersion,
    WorkerInfo,
    WorkflowInfo,
)

#: Counts of runs per status stop here (see App.count_runs): "10,000+".
COUNT_CAP = 10_000
#: The workflows page counts the statuses of each version's newest runs.
RECENT_RUNS = 1_000
#: The events page shows the newest emitted events.
RECENT_EVENTS = 100
#: The run page shows at most this many runs of a continue-as-new chain on each side
#: of the run shown (one read each); the first and last links go further.
CHAIN_REACH = 10
#: A worker whose heartbeat is older than this is not counted as running.
LIVE_SECONDS = 60.0
#: What the overview shows of a schedule (perdure.ScheduleInfo), when it has them.
SCHEDULE_COLUMNS = (
    "name",
    "workflow",
    "cron",
    "timezone",
    "paused",
    "next_tick",
    "last_tick",
    "last_run_id",
)


@dataclass(frozen=True)
class Capabilities:
    """Library features that other work adds: shown once the App has them."""

    fork: bool
    schedules: bool


@dataclass(frozen=True)
class FilterOptions:
    """What the runs page's selects offer."""

    workflows: list[str]
    versions: list[int]
    queues: list[str]
    workers: list[str]


@dataclass(frozen=True)
class RunsPage:
    """One page of runs, the counts per status, and the cursor of the next page (or None)."""

    runs: list[Run]
    counts: dict[str, int]
    next_cursor: str | None


@dataclass(frozen=True)
class WorkerRow:
    """A worker and the tasks it holds now."""

    info: WorkerInfo
    held: list[dict[str, Any]]


@dataclass(frozen=True)
class Overview:
    """The overview page's data."""

    activity: list[dict[str, Any]]
    counts: dict[str, int]
    queues: list[QueueInfo]
    workers: list[WorkerRow]
    schedules: list[dict[str, Any]] | None


@dataclass(frozen=True)
class RunView:
    """One run with everything recorded about it."""

    run: Run
    steps: list[Step]
    history: list[HistoryEvent]
    signals: list[dict[str, Any]]
    events: list[dict[str, Any]]
    children: list[Run]
    parent: Run | None
    definition: dict[str, Any] = field(default_factory=dict)
    #: Each step position's attempts that logged something (app.step_logs).
    logs: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    #: The updates the run was sent, oldest first (app.updates).
    updates: list[dict[str, Any]] = field(default_factory=list)
    #: The continue-as-new chain around the run, oldest first (the run included),
    #: empty for a run that neither continued nor was continued.
    chain: list[Run] = field(default_factory=list)
    #: Whether runs before the first / after the last of ``chain`` were left out.
    chain_cut: tuple[bool, bool] = (False, False)

    def without_payloads(self) -> RunView:
        """The same page's data with every payload hidden, and no step logs (redact)."""
        return dataclasses.replace(
            self,
            run=redact.run(self.run),
            steps=[redact.step(s) for s in self.steps],
            history=[redact.history(h) for h in self.history],
            signals=redact.entries(self.signals, "payload"),
            events=redact.entries(self.events, "value"),
            updates=redact.updates(self.updates),
            children=[redact.run(c) for c in self.children],
            chain=[redact.run(c) for c in self.chain],
            parent=None if self.parent is None else redact.run(self.parent),
            logs={},
        )


class DashboardData:
    """The dashboard's view of one perdure App."""

    def __init__(self, app: App, reader: App | None = None) -> None:
        """Act through ``app``; read through ``reader`` (a hot standby) if given, else ``app``."""
        self.app = app
        self.reads = reader or app
        self._lag: tuple[float, float | None] | None = None

    def replication_lag(self) -> float | None:
        """Seconds the standby read from lags behind the primary (None: reading the primary).

        Read at most once every two seconds.
        """
        if self.reads is self.app:
            return None
        now = time.monotonic()
        if self._lag is None or now - self._lag[0] > 2.0:
            try:
                self._lag = (now, replica.replication_lag(self.reads))
            except DatabaseUnavailable:
                self._lag = (now, None)
        return self._lag[1]

    @property
    def capabilities(self) -> Capabilities:
        """Which optional library features this App has."""
        return Capabilities(
            fork=callable(getattr(self.app, "fork", None)),
            schedules=callable(getattr(self.app, "schedules", None)),
        )

    # Reads -----------------------------------------------------------------------

    def runs_page(self, filter: RunFilter, *, cursor: str | None, limit: int) -> RunsPage:
        """Runs newest first matching ``filter`` after ``cursor``, with counts per status.

        ``cursor`` is the ``next_cursor`` of the page before (``app.list_runs``).
        """
        criteria = {f.name: getattr(filter, f.name) for f in dataclasses.fields(filter)}
        found = self.reads.list_runs(**criteria, cursor=cursor, limit=limit)
        counts = self.reads.count_runs(filter, cap=COUNT_CAP)
        return RunsPage(list(found), counts, found.next_cursor)

    def filter_options(self) -> FilterOptions:
        """Workflow names, versions, queues and workers known to the database."""
        flows = self.reads.registered_workflows()
        return FilterOptions(
            workflows=sorted({w.name for w in flows}),
            versions=sorted({w.version for w in flows}),
            queues=[q.name for q in self.reads.queues()],
            workers=[w.id for w in self.reads.workers()],
        )

    def overview(self, since: datetime, bucket_seconds: float) -> Overview:
        """Activity since ``since`` in buckets, counts, queues, workers and schedules."""
        held: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for task in self.reads.held_tasks():
            held[task["worker_id"]].append(task)
        return Overview(
            activity=self.reads.run_activity(since=since, bucket_seconds=bucket_seconds),
            counts=self.reads.count_runs(RunFilter(since=since), cap=COUNT_CAP),
            queues=self.reads.queues(),
            workers=[WorkerRow(w, held.get(w.id, [])) for w in self.reads.workers()],
            schedules=self.schedules(),
        )

    def schedules(self) -> list[dict[str, Any]] | None:
        """The App's schedules as dicts of SCHEDULE_COLUMNS, or None without schedules."""
        listing = getattr(self.app, "schedules", None)
        if not callable(listing):
            return None
        found = [_as_dict(item) for item in listing()]
        return [{k: item[k] for k in SCHEDULE_COLUMNS if k in item} or item for item in found]

    def run_view(self, ref: str) -> RunView:
        """Run ``ref`` (id or key) with its steps, history, signals, events, updates and
        relatives."""
        run = self.reads.get_run(ref)
        parent = None
        if run.parent_run_id is not None:
            parent = self.reads.get_run(run.parent_run_id)
        definition: dict[str, Any] = {}
        for info in self.reads.registered_workflows():
            if info.name == run.workflow and info.version == run.version:
                definition = info.definition if info.kind == "graph" else {}
        logs: dict[int, list[dict[str, Any]]] = defaultdict(list)
        for entry in self.reads.step_logs(run.id):
            logs[entry["position"]].append(entry)
        chain, cut = self.chain(run)
        return RunView(
            chain=chain,
            chain_cut=cut,
            run=run,
            logs=dict(logs),
            steps=self.reads.steps(run.id),
            history=self.reads.history(run.id),
            signals=self.reads.signals(run.id),
            events=self.reads.events(run.id),
            updates=self.reads.updates(run.id),
            children=self.reads.list_runs(parent=run.id, limit=200),
            parent=parent,
            definition=definition,
        )

    def chain(self, run: Run) -> tuple[list[Run], tuple[bool, bool]]:
        """The continue-as-new chain around ``run``, oldest first, up to CHAIN_REACH
        runs on each side, and whether runs were left out before and after."""
        if run.continued_from is None and run.continued_to is None:
            return [], (False, False)
        before: list[Run] = []
        at = run
        while at.continued_from is not None and len(before) < CHAIN_REACH:
            at = self.reads.get_run(at.continued_from)
            before.append(at)
        after: list[Run] = []
        at = run
        while at.continued_to is not None and len(after) < CHAIN_REACH:
            at = self.reads.get_run(at.continued_to)
            after.append(at)
        cut = (
            bool(before and before[-1].continued_from),
            bool(after and after[-1].continued_to),
        )
        return [*reversed(before), run, *after], cut

    def events(self) -> list[dict[str, Any]]:
        """The latest RECENT_EVENTS emitted events, with the runs each woke and started."""
        found: list[dict[str, Any]] = self.app.emitted_events(limit=RECENT_EVENTS)
        return found

    def workflows(self) -> list[WorkflowInfo]:
        """Registered workflow versions, with the statuses of each one's newest runs.

        Counted among the newest RECENT_RUNS runs of each version: bounded,
        where counting every run of a busy workflow would take seconds.
        """
        return [
            dataclasses.replace(
                info,
                counts={
                    status: n
                    for status, n in self.reads.count_runs(
                        RunFilter(workflow=info.name, version=info.version), cap=RECENT_RUNS
                    ).items()
                    if n
                },
            )
            for info in self.reads.registered_workflows()
        ]

    # Actions: the same App methods the CLI calls ------------------------------------

    def cancel(self, ref: str, reason: str) -> Run:
        """Cancel run ``ref`` (``perdure runs cancel``)."""
        return self.app.cancel(ref, reason=reason or "cancelled from the dashboard")

    def retry(self, ref: str) -> str:
        """Queue failed or cancelled run ``ref`` again (``perdure runs retry``); its id."""
        return self.app.retry(ref).id

    def pause(self, ref: str) -> Run:
        """Pause run ``ref`` (``perdure runs pause``)."""
        return self.app.pause(ref)

    def resume(self, ref: str) -> Run:
        """Resume run ``ref`` or wake it from a sleep (``perdure runs resume``)."""
        return self.app.resume(ref)

    def signal(self, ref: str, name: str, payload_text: str, key: str | None) -> int:
        """Send signal ``name`` with the JSON ``payload_text`` (``perdure runs signal``).

        Text that is not JSON is refused with ConfigurationError before
        anything is sent; an empty payload sends null.
        """
        payload = parse_json(payload_text, "payload", "nothing was sent")
        return self.app.signal(ref, name, payload, key=key or None)

    def stranded(self) -> list[StrandedVersion]:
        """The workflow versions whose unfinished runs no live worker serves (read on
        the primary: who is live now is what matters)."""
        return self.app.stranded()

    def move_runs(self, workflow: str, version: int, to_text: str) -> MovedRuns:
        """Move the runs of ``workflow@version`` that recorded nothing yet to the version
        ``to_text`` names (``perdure runs move-version``); what moved and what stayed."""
        try:
            target = int(to_text.strip())
        except ValueError:
            raise ConfigurationError(
                f"the version to move to must be a number, not {to_text!r}; no run was moved"
            ) from None
        return self.app.move_runs(workflow, version, target)

    def start(self, workflow: str, version: int, input_text: str, key: str, queue: str) -> str:
        """Start a run of ``workflow`` version ``version`` with the JSON ``input_text``
        (``perdure runs start``); the new run's id.

        Text that is not JSON is refused with ConfigurationError before
        anything is written; an empty input starts the run with null. An empty
        ``key`` or ``queue`` means none (the workflow's own queue).
        """
        value = parse_json(input_text, "input", "no run was started")
        return self.app.start(
            workflow, value, key=key.strip() or None, version=version, queue=queue.strip() or None
        ).id

    def lost_workers(self, history: list[HistoryEvent]) -> frozenset[str]:
        """Which workers that lost a lease in ``history`` are recorded as lost
        (read only when the history has such an event)."""
        named = {h.worker_id for h in history if h.event == "lease_expired" and h.worker_id}
        if not named:
            return frozenset()
        return frozenset(w.id for w in self.reads.workers() if w.id in named and w.status == "lost")

    def serving(self, run: Run) -> list[str]:
        """Live workers (a heartbeat in the last minute) that would claim ``run``:
        they serve its queue and have its workflow version's code."""
        fresh = time.time() - LIVE_SECONDS
        code = f"{run.workflow}@{run.version}"
        return [
            w.id
            for w in self.reads.workers()
            if w.status == "running"
            and w.heartbeat_at.timestamp() > fresh
            and run.queue in w.queues
            and (code in w.workflows or run.workflow in w.workflows)
        ]

    def fork(self, ref: str, step: str) -> str:
        """Start a new run from run ``ref``'s step ``step`` (``perdure runs fork``); its id."""
        fork = getattr(self.app, "fork", None)
        if not callable(fork):
            raise ConfigurationError("this version of perdure cannot fork runs")
        started = fork(ref, from_step=step)
        return str(getattr(started, "id", started))


def parse_json(text: str, what: str, consequence: str) -> Any:
    """The JSON value of ``text`` (None for blank text), or ConfigurationError saying
    where it is wrong and that ``consequence``."""
    if json_depth(text.encode("utf-8", "surrogatepass")) > MAX_DEPTH:
        raise ConfigurationError(
            f"the {what} is nested deeper than {MAX_DEPTH} levels; {consequence}"
        )
    try:
        return json.loads(text) if text.strip() else None
    except json.JSONDecodeError as exc:
        raise ConfigurationError(
            f"the {what} is not valid JSON: {exc.msg} at line {exc.lineno}, "
            f"column {exc.colno}; {consequence}"
        ) from None


def _as_dict(item: Any) -> dict[str, Any]:
    """A schedule (dataclass, mapping or object) as a dict for the template."""
    if dataclasses.is_dataclass(item) and not isinstance(item, type):
        return dataclasses.asdict(item)
    if isinstance(item, dict):
        return dict(item)
    return {k: v for k, v in vars(item).items() if not k.startswith("_")}
