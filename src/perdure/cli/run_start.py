"""``perdure runs start`` and ``perdure runs result``: start a run by name, wait for its result.

The command line has no workflow code: a run is started by the workflow's
name, pinned to the newest version registered in the database (a worker
registers its workflows when it starts; ``perdure migrate --app`` does too),
as ``App.start`` does without the code. A name no registered workflow has is
refused with the nearest registered names.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from perdure.cli import render, suggest
from perdure.cli.options import json_option
from perdure.errors import (
    ResultTimeout,
    RunCancelled,
    RunFailed,
    UnknownWorkflow,
)

if TYPE_CHECKING:
    from perdure.api.app import App
    from perdure.cli.state import CliState

#: Exit codes of ``--wait`` and ``runs result``: the run failed, was cancelled, is not done.
EXIT_FAILED = 1
EXIT_CANCELLED = 3
EXIT_TIMEOUT = 4


def parse_input(text: str | None) -> Any:
    """INPUT as JSON, or ``@file`` (``@-`` for stdin) holding JSON; None when left out."""
    if text is None:
        return None
    source = "INPUT"
    if text.startswith("@"):
        path = text[1:]
        try:
            if path == "-":
                text = sys.stdin.read()
            else:
                text = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise click.BadParameter(
                f"cannot read {path}: {exc.strerror}", param_hint=source
            ) from None
        source = f"INPUT ({path})"
    try:
        return json.loads(text)
    except ValueError as exc:
        raise click.BadParameter(
            f"not valid JSON ({exc}); a string is quoted: '\"ada\"'", param_hint=source
        ) from None


def _unknown(app: App, exc: UnknownWorkflow) -> click.ClickException:
    """The error for a workflow name no registered workflow has, with the nearest ones."""
    registered = [w.name for w in app.registered_workflows()]
    hint = suggest.hint(exc.name, registered)
    if not hint and not registered:
        hint = "; no workflow is registered yet: start a worker, or `perdure migrate --app APP`"
    elif not hint:
        hint = f"; registered: {', '.join(sorted(set(registered)))}"
    where = exc.name if exc.version is None else f"{exc.name} version {exc.version}"
    return click.ClickException(f"UnknownWorkflow: no workflow {where!r} is registered{hint}")


@click.command("start")
@click.argument("workflow")
@click.argument("input", required=False, metavar="[INPUT]")
@click.option("--key", default=None, help="Idempotency key: starting again returns that run.")
@click.option("--queue", default=None, help="Put the run on this queue instead of its own.")
@click.option("--version", type=click.IntRange(min=1), help="Pin this version (default: newest).")
@click.option(
    "--delay", metavar="SECONDS", type=click.FloatRange(min=0), help="Make the run due later."
)
@click.option("--wait", is_flag=True, help="Wait for the run to finish and print its result.")
@click.option(
    "--timeout",
    metavar="SECONDS",
    type=click.FloatRange(min=0),
    default=None,
    help="With --wait: give up after this long (exit code 4).",
)
@json_option("Print the run (and with --wait its result) as JSON.")
@click.pass_obj
def start(
    state: CliState,
    workflow: str,
    input: str | None,
    key: str | None,
    queue: str | None,
    version: int | None,
    delay: float | None,
    wait: bool,
    timeout: float | None,
    as_json: bool,
) -> None:
    """Start a run of WORKFLOW with INPUT (JSON, or @file; default null).

    \b
    perdure runs start greet '"ada"'
    perdure runs start checkout '{"order": 9182}' --key checkout:9182 --wait
    perdure runs start report @input.json --delay 3600

    The workflow is looked up by name among those registered in the
    database. With --wait the result is printed when the run finishes; the
    exit code is 1 if it failed, 3 if it was cancelled, 4 on --timeout.
    """
    payload = parse_input(input)
    with state.app() as app:
        try:
            handle = app.start(
                workflow, payload, key=key, version=version, delay=delay, queue=queue
            )
        except UnknownWorkflow as exc:
            raise _unknown(app, exc) from None
        run = handle.get()
        document: dict[str, Any] = {
            "id": run.id,
            "key": run.key,
            "workflow": run.workflow,
            "version": run.version,
            "queue": run.queue,
            "created": handle.created,
        }
        if not wait:
            verb = "started" if handle.created else "already exists:"
            line = f"run {run.id} {verb} ({run.workflow}@{run.version} on queue {run.queue})"
            if as_json:
                render.echo_json(document)
            else:
                click.echo(line)
            return
        if not as_json:
            verb = "started" if handle.created else "exists"
            click.echo(f"run {run.id} {verb}; waiting for its result", err=True)
        _print_result(app, run.id, timeout, as_json, document)


@click.command("result")
@click.argument("ref", metavar="ID_OR_KEY")
@click.option("--wait", is_flag=True, help="Wait for the run to finish.")
@click.option(
    "--timeout",
    metavar="SECONDS",
    type=click.FloatRange(min=0),
    default=None,
    help="With --wait: give up after this long (exit code 4).",
)
@json_option("Print {id, status, output, error} as JSON.")
@click.pass_obj
def result(state: CliState, ref: str, wait: bool, timeout: float | None, as_json: bool) -> None:
    """Print the result of a run: its output once it completed.

    Without --wait a run that has not finished says its status (exit code 4).
    A failed run prints its error (exit code 1), a cancelled one says so
    (exit code 3).
    """
    with state.app() as app:
        run = app.get_run(ref)
        _print_result(app, run.id, timeout if wait else 0.0, as_json, {"id": run.id})


def _print_result(
    app: App, run_id: str, timeout: float | None, as_json: bool, document: dict[str, Any]
) -> None:
    """Wait up to ``timeout`` (None: for ever) for the run; print its output or why not."""
    try:
        output = app.handle(run_id).result(timeout=timeout)
    except RunFailed as exc:
        error = exc.error or {}
        _finish(
            as_json,
            {**document, "status": "failed", "error": error},
            EXIT_FAILED,
            f"run {run_id} failed: {render.error_summary(error, 400)}",
        )
    except RunCancelled:
        _finish(
            as_json,
            {**document, "status": "cancelled"},
            EXIT_CANCELLED,
            f"run {run_id} was cancelled",
        )
    except ResultTimeout as exc:
        status = exc.status or "unfinished"
        waited = f"after {timeout:g} s" if timeout else "yet"
        _finish(
            as_json,
            {**document, "status": status},
            EXIT_TIMEOUT,
            f"run {run_id} has not finished {waited} (it is {status}); "
            "--wait [--timeout S] waits for it",
        )
    else:
        if as_json:
            render.echo_json({**document, "status": "completed", "output": output})
        else:
            click.echo(render.dumps(output))


def _finish(as_json: bool, document: dict[str, Any], code: int, line: str) -> None:
    """Say why there is no output (JSON on stdout, or a line on stderr) and exit ``code``."""
    if as_json:
        render.echo_json(document)
    else:
        click.echo(line, err=True)
    raise SystemExit(code)


def attach(group: click.Group) -> None:
    """Add ``start`` and ``result`` to the ``runs`` group."""
    group.add_command(start)
    group.add_command(result)
