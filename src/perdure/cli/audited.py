"""Recording the CLI's state-changing commands in the audit record (docs/security.md).

``attach`` wraps the commands of ``AUDITED``: after each one, refused or
not, one entry says who (``--as NAME``, else ``PERDURE_ACTOR``, else the OS
user), from which host, what (the action), which runs (the refs given), the
outcome (ok, or error with the message) and the options that name things
(never an input, a payload or a token). Dry runs and printed grants change
nothing and are not recorded. When the entry of a command that succeeded
cannot be written (the role may not), a warning goes to stderr and the
command's own outcome stands.
"""

from __future__ import annotations

import getpass
import socket
from datetime import datetime, timedelta
from typing import Any

import click

from perdure.cli.state import CliState

#: The audited commands (their path) and the action each one records.
AUDITED: dict[tuple[str, ...], str] = {
    ("runs", "cancel"): "cancel",
    ("runs", "retry"): "retry",
    ("runs", "restart"): "restart",
    ("runs", "fork"): "fork",
    ("runs", "signal"): "signal",
    ("runs", "update"): "update",
    ("runs", "pause"): "pause",
    ("runs", "resume"): "resume",
    ("runs", "start"): "start",
    ("runs", "move-version"): "move-version",
    ("schedules", "pause"): "schedule-pause",
    ("schedules", "resume"): "schedule-resume",
    ("schedules", "remove"): "schedule-remove",
    ("schedules", "trigger"): "schedule-trigger",
    ("queues", "set"): "queue-set",
    ("migrate",): "migrate",
    ("prune",): "prune",
}
#: Parameters that name runs.
_RUN_PARAMS = ("ref",)
#: Parameters never recorded: values, payloads, secrets, and what says nothing.
_SECRET = {"input", "data", "payload", "token", "as_json", "yes", "plan", "print_grants"}


def actor() -> str:
    """Who runs the command: ``--as``, else PERDURE_ACTOR, else the OS user."""
    ctx = click.get_current_context(silent=True)
    state = None if ctx is None else ctx.find_root().obj
    given = getattr(state, "actor", None)
    if given:
        return str(given)
    try:
        return getpass.getuser() or "unknown"
    except (KeyError, OSError):
        return "unknown"


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | float | str):
        return value
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return f"{value.total_seconds():g}s"
    if isinstance(value, list | tuple):
        return ", ".join(str(v) for v in value) or None
    return str(value)


def _detail(params: dict[str, Any]) -> dict[str, Any]:
    return {
        name: _plain(value)
        for name, value in params.items()
        if name not in _SECRET and name not in _RUN_PARAMS and value not in (None, (), [], False)
    }


def _changes_nothing(action: str, params: dict[str, Any]) -> bool:
    if params.get("dry_run") or params.get("print_grants") or params.get("plan"):
        return True
    return False


def record(state: CliState, action: str, params: dict[str, Any], error: str | None) -> None:
    """Append the entry of ``action`` run with ``params``; a warning if it cannot be written."""
    from perdure.errors import PerdureError

    refs = params.get("ref")
    runs = [refs] if isinstance(refs, str) else [r for r in (refs or ()) if isinstance(r, str)]
    detail = _detail(params)
    if error is not None:
        detail["error"] = error
    try:
        with state.app() as app:
            app.record_audit(
                actor=actor(),
                via="cli",
                source="cli",
                address=socket.gethostname()[:200] or None,
                action=action,
                runs=runs,
                outcome="ok" if error is None else "error",
                detail=detail or None,
            )
    except (PerdureError, OSError) as exc:
        if error is None:  # a failed command's own error already says what is wrong
            click.echo(f"warning: {action} was not recorded in the audit record: {exc}", err=True)


def wrap(command: click.Command, action: str) -> None:
    """Make ``command`` record ``action`` in the audit record after it runs."""
    original = command.callback
    if original is None or getattr(command, "_perdure_audited", False):
        return

    def callback(*args: Any, **options: Any) -> Any:
        ctx = click.get_current_context()
        state = ctx.find_root().obj
        if not isinstance(state, CliState) or _changes_nothing(action, options):
            return original(*args, **options)
        try:
            result = original(*args, **options)
        except click.exceptions.Exit as exc:
            code = exc.exit_code
            record(state, action, options, None if code == 0 else f"exit {code}")
            raise
        except Exception as exc:  # recorded, then raised as it was
            message = exc.format_message() if isinstance(exc, click.ClickException) else str(exc)
            record(state, action, options, f"{type(exc).__name__}: {message}"[:500])
            raise
        record(state, action, options, None)
        return result

    command.callback = callback
    command._perdure_audited = True  # type: ignore[attr-defined]


def attach(name: str, command: click.Command) -> None:
    """Wrap the audited commands at or under ``name`` (a top-level command or group)."""
    for path, action in AUDITED.items():
        if path[0] != name:
            continue
        found: click.Command | None = command
        for part in path[1:]:
            found = found.commands.get(part) if isinstance(found, click.Group) else None
        if found is not None:
            wrap(found, action)
