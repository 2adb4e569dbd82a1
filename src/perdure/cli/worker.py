"""``perdure worker APP``: serve an application's workflows until SIGINT or SIGTERM."""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import threading
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import click

from perdure.api.app import App
from perdure.cli import times
from perdure.cli.render import safe_url
from perdure.observability.logs import LOG_FORMATS, configure_logging
from perdure.store import caller

if TYPE_CHECKING:
    from perdure.cli.state import CliState

LOG_LEVELS = ("debug", "info", "warning", "error")


def default_worker_id() -> str:
    """A worker id unique on this machine: ``host-pid-random``."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"


def describe_database(app: App, embedded_server: bool) -> str:
    """Where the worker's data is, for its start-up line (the password is hidden)."""
    where = f"schema {app.schema} on {safe_url(app.url)}"
    if not embedded_server:
        return where
    from perdure.store import embedded

    return f"{where} (embedded PostgreSQL: {embedded.removal_hint(embedded.default_data_dir())})"


def startup_line(app: App, worker_id: str, queues: list[str], embedded_server: bool) -> str:
    """One line saying which worker serves which workflows and queues, on which database,
    and which emitted events start which workflows."""
    found = app.registry.all()
    workflows = ", ".join(f"{name}@{version}" for name, version in sorted(found))
    triggers = sorted(
        f"{d.name} on {t.name}"
        + (f" (batches of {t.batch_size} / {t.batch_window:g}s)" if t.batched else "")
        for d in found.values()
        for t in getattr(d, "triggers", ())
    )
    started = f"; started by events: {', '.join(triggers)}" if triggers else ""
    return (
        f"perdure worker {worker_id} serving workflows {workflows} "
        f"on queues {', '.join(queues)}{started}; "
        f"database: {describe_database(app, embedded_server)}"
    )


@click.command()
@click.argument("target", metavar="APP")
@click.option(
    "--concurrency",
    "-c",
    type=click.IntRange(min=1),
    default=64,
    show_default=True,
    help="Tasks executed at once (see docs/operating.md for choosing it).",
)
@click.option(
    "--queue",
    "-q",
    "queues",
    multiple=True,
    help="Queue to serve (repeatable; default: every queue of the app's workflows).",
)
@click.option(
    "--lease-seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="How long a claimed task stays held without a heartbeat.",
)
@click.option(
    "--pool-size",
    type=click.IntRange(min=1),
    default=None,
    help="Most statement connections the worker opens (default: concurrency + 4, at most 20); "
    "plain def steps' ctx.transaction get half as many more (docs/deploying.md).",
)
@click.option(
    "--detect-nondeterminism",
    is_flag=True,
    help="Warn (file:line) when a workflow body calls datetime.now, time.time, random "
    "or uuid.uuid4 directly instead of ctx.now(), ctx.random(), ctx.uuid4() or a step.",
)
@click.option(
    "--poll-seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Fallback polling interval when no notification arrives.",
)
@click.option(
    "--blocked-loop-seconds",
    type=click.FloatRange(min=0, min_open=True),
    default=1.0,
    show_default=True,
    help="Warn when a step blocks the worker's event loop longer than this.",
)
@click.option(
    "--shutdown-seconds",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    help="On SIGINT/SIGTERM, how long in-flight runs may finish before they are handed back.",
)
@click.option(
    "--connect-timeout",
    type=click.FloatRange(min=0),
    default=30.0,
    show_default=True,
    envvar="PERDURE_CONNECT_TIMEOUT",
    show_envvar=True,
    help="At start-up, how long to wait for the database to accept a connection before "
    "exiting with status 1 (0: exit at once). See docs/operating.md for Kubernetes.",
)
@click.option("--worker-id", default=None, help="This worker's id (default: host-pid-random).")
@click.option(
    "--no-migrate",
    is_flag=True,
    help="Do not migrate; only check the schema is current (for a role without DDL rights).",
)
@click.option(
    "--prune-after",
    metavar="DURATION",
    callback=times.duration_option,
    help="Delete runs that finished longer ago than this (30d, 12h), in the maintenance pass.",
)
@click.option("--prune-archive", is_flag=True, help="With --prune-after: archive them instead.")
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="info",
    show_default=True,
    help="Logging level.",
)
@click.option(
    "--log-format",
    type=click.Choice(LOG_FORMATS, case_sensitive=False),
    default="text",
    show_default=True,
    help="text lines, or one JSON object per line with run_id, step, workflow, attempt, worker_id.",
)
@click.option(
    "--metrics-port",
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="Serve Prometheus metrics on this port at /metrics (0: any free port).",
)
@click.option(
    "--metrics-host",
    default="127.0.0.1",
    show_default=True,
    help="Address the metrics endpoint listens on (0.0.0.0: every interface).",
)
@click.option(
    "--direct-url",
    default=None,
    help="Direct URL to the primary when the database URL goes through a transaction-mode "
    "pooler: LISTEN, the maintenance lock and migrations use it (default: "
    "PERDURE_DIRECT_DATABASE_URL).",
)
@click.option(
    "--stats-file",
    type=click.Path(dir_okay=False, writable=True),
    default=None,
    help="At exit, write the worker's counts (tasks, statements, round trips) here as JSON.",
)
@click.pass_obj
def worker(
    state: CliState,
    target: str,
    concurrency: int,
    queues: tuple[str, ...],
    lease_seconds: float,
    pool_size: int | None,
    detect_nondeterminism: bool,
    poll_seconds: float,
    blocked_loop_seconds: float,
    shutdown_seconds: float,
    connect_timeout: float,
    worker_id: str | None,
    no_migrate: bool,
    prune_after: timedelta | None,
    prune_archive: bool,
    log_level: str,
    log_format: str,
    metrics_port: int | None,
    metrics_host: str,
    direct_url: str | None,
    stats_file: str | None,
) -> None:
    """Run a worker for the workflows of APP (module:attr, e.g. myapp:app).

    The worker claims runs from its queues until SIGINT or SIGTERM, then stops
    claiming and lets in-flight runs finish for up to --shutdown-seconds; a
    second signal stops at once and hands unfinished runs back to the queue.
    With --metrics-port it serves Prometheus metrics; when APP configures an
    OpenTelemetry tracer provider, it traces runs and steps (docs/observability.md).
    Once an hour one of the workers (whichever takes the schema's maintenance
    lock) creates history's day partitions ahead and, with --prune-after,
    deletes or archives old finished runs.
    """
    if prune_archive and prune_after is None:
        raise click.BadParameter(
            "--prune-archive needs --prune-after", param_hint="--prune-archive"
        )
    configure_logging(log_level, log_format.lower())
    app = load(state, target)
    if direct_url is not None:
        app.configure(direct_url=direct_url)
    if no_migrate:
        app.auto_migrate = False
    with app:
        # Resolving the URL starts the embedded server when no database was given.
        embedded_server = state.url is None
        if not embedded_server:
            caller.wait_reachable(app.session_url, connect_timeout)
        worker_id = worker_id or default_worker_id()
        served = sorted(set(queues) or {d.queue for d in app.registry.all().values()})
        line = startup_line(app, worker_id, served, embedded_server)
        if log_format.lower() == "json":
            # Every line of a JSON log is JSON, the first one too.
            logging.getLogger("perdure.worker").info("%s", line, extra={"worker_id": worker_id})
        else:
            click.echo(line, err=True)
        served_worker = app.run_worker(
            concurrency=concurrency,
            queues=list(queues) or None,
            lease_seconds=lease_seconds,
            pool_size=pool_size,
            detect_nondeterminism=detect_nondeterminism,
            poll_seconds=poll_seconds,
            blocked_loop_seconds=blocked_loop_seconds,
            shutdown_seconds=shutdown_seconds,
            worker_id=worker_id,
            metrics_port=metrics_port,
            metrics_host=metrics_host,
            prune_after=prune_after,
            prune_archive=prune_archive,
            connect_seconds=connect_timeout,
        )
    logging.getLogger("perdure.worker").info("worker %s stopped", worker_id)
    if stats_file is not None:
        Path(stats_file).write_text(json.dumps(served_worker.counts, sort_keys=True))
    exit_now_if_steps_are_stuck()


def exit_now_if_steps_are_stuck() -> None:
    """Exit at once if stuck step threads would keep the process alive.

    A plain ``def`` step cannot be interrupted from outside its thread. When a
    shutdown hands such a run back to the queue, its thread may still be
    running; Python would wait for it at exit. Its task was already released
    (another worker resumes the run), so nothing is lost by exiting now.
    """
    # Idle pool threads exit within moments of the pool's shutdown; give
    # them that moment so that only threads still inside a step count.
    deadline = time.monotonic() + 2.0
    for thread in threading.enumerate():
        if thread.name.startswith("perdure-step"):
            thread.join(max(0.0, deadline - time.monotonic()))
    stuck = [t for t in threading.enumerate() if t.name.startswith("perdure-step") and t.is_alive()]
    if stuck:
        logging.getLogger("perdure.worker").warning(
            "%d stuck step thread(s) still running; exiting without waiting for them",
            len(stuck),
        )
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)


def load(state: CliState, target: str) -> App:
    """The App named by ``target``, refusing one that defines no workflow."""
    app = state.app(target)
    if not app.registry.all():
        raise click.BadParameter(f"{target} defines no workflow; a worker would have no work")
    return app
