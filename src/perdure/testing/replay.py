"""The deploy-safety check: do in-flight runs still replay against this code?

``check_replay(app)`` reads the recorded steps of the unfinished runs of the
App's workflows (or of runs exported with ``perdure runs export``) and replays
each against the App's code without side effects. ``perdure check-replay
myapp:app`` runs it from the command line and exits 1 if any run diverges.
``patch_statuses(reports)`` says, per ``ctx.patched`` id, which open runs were
recorded before the patch (and need its old code path).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from perdure.api.app import App
from perdure.engine.replay import ReplayReport, replay_run
from perdure.types import Step, StepStatus

IN_FLIGHT = ("queued", "running", "waiting", "paused")


def export_runs(
    app: App, *, statuses: Iterable[str] = IN_FLIGHT, limit: int = 1000
) -> list[dict[str, Any]]:
    """The recorded runs (input and steps) of the given statuses, as JSON-ready dicts."""
    exported = []
    for status in statuses:
        for run in app.list_runs(status=status, limit=limit):
            exported.append(
                {
                    "id": run.id,
                    "workflow": run.workflow,
                    "version": run.version,
                    "input": run.input,
                    "status": run.status.value,
                    "steps": [_step_dict(s) for s in app.steps(run.id)],
                    "updates": _applied_updates(app, run.id),
                }
            )
    return exported


def _applied_updates(app: App, run_id: str) -> list[dict[str, Any]]:
    """The updates the run accepted: what a replay applies again, where and in what order."""
    return [
        {
            "update_id": u["update_id"],
            "name": u["name"],
            "payload": u["payload"],
            "anchor_position": u["anchor_position"],
            "seq": u["seq"],
        }
        for u in app.updates(run_id)
        if u["anchor_position"] is not None
    ]


def _step_dict(step: Step) -> dict[str, Any]:
    return {
        "position": step.position,
        "name": step.name,
        "kind": step.kind,
        "status": step.status.value,
        "attempts": step.attempts,
        "output": step.output,
        "error": step.error,
        "started_at": step.started_at.isoformat(),
        "wake_at": step.wake_at.isoformat() if step.wake_at else None,
    }


def _step(data: dict[str, Any]) -> Step:
    return Step(
        position=int(data["position"]),
        name=str(data["name"]),
        kind=str(data.get("kind", "step")),
        status=StepStatus(data["status"]),
        attempts=int(data.get("attempts", 1)),
        output=data.get("output"),
        error=data.get("error"),
        worker_id=None,
        started_at=datetime.fromisoformat(data["started_at"])
        if data.get("started_at")
        else datetime.now(UTC),
        completed_at=None,
        wake_at=datetime.fromisoformat(data["wake_at"]) if data.get("wake_at") else None,
    )


def load_export(path: str | Path) -> list[dict[str, Any]]:
    """Read a file written by ``perdure runs export``."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(data, list):
        raise ValueError(f"{path} is not a perdure runs export (a JSON list of runs)")
    return data


def check_replay(app: App, runs: list[dict[str, Any]] | None = None) -> list[ReplayReport]:
    """Replay ``runs`` (default: the App's in-flight runs) against the App's code."""
    recorded = export_runs(app) if runs is None else runs
    return asyncio.run(_check(app, recorded))


async def _check(app: App, runs: list[dict[str, Any]]) -> list[ReplayReport]:
    reports = []
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="perdure-replay") as threads:
        for run in runs:
            spec = app.registry.get(run["workflow"], int(run["version"]))
            if spec is None:
                reports.append(
                    ReplayReport(
                        run["id"],
                        run["workflow"],
                        int(run["version"]),
                        ok=False,
                        replayed=0,
                        error=f"no code for workflow {run['workflow']!r} v{run['version']}",
                    )
                )
                continue
            steps = sorted((_step(s) for s in run["steps"]), key=lambda s: s.position)
            reports.append(
                await replay_run(
                    spec,
                    threads,
                    run_id=run["id"],
                    input=run["input"],
                    steps=steps,
                    updates=run.get("updates") or (),
                )
            )
    return reports


def assert_replays(app: App, runs: list[dict[str, Any]] | None = None) -> list[ReplayReport]:
    """Assert every run replays against the App's code; the reports otherwise."""
    reports = check_replay(app, runs)
    bad = [r.describe() for r in reports if not r.ok]
    assert not bad, "runs that would not replay after this deploy:\n  " + "\n  ".join(bad)
    return reports


@dataclass(frozen=True)
class PatchStatus:
    """Whether the old code path of patch ``patch_id`` is still needed by open runs."""

    patch_id: str
    #: Open runs whose history predates the patch: they replay its old code path.
    runs_before: tuple[str, ...]
    #: Open runs that recorded its marker (took the new code path).
    runs_after: tuple[str, ...]

    @property
    def retirable(self) -> bool:
        """True when no open run needs the old code path: it can be deleted."""
        return not self.runs_before

    def describe(self) -> str:
        """One line for people."""
        if self.retirable:
            return (
                f"patch {self.patch_id!r}: no open run recorded before it; the old code path "
                f"can go: replace ctx.patched({self.patch_id!r}) by "
                f"ctx.deprecate_patch({self.patch_id!r}) and keep the new code"
            )
        return (
            f"patch {self.patch_id!r}: {len(self.runs_before)} open run(s) recorded before "
            "it still replay the old code path; keep it"
        )


def patch_statuses(reports: list[ReplayReport]) -> list[PatchStatus]:
    """Per patch id met in ``reports`` (from ``check_replay``), which open runs need
    its old code path; sorted by patch id."""
    before: dict[str, list[str]] = {}
    after: dict[str, list[str]] = {}
    for report in reports:
        for patch_id, taken in report.patches:
            before.setdefault(patch_id, [])
            after.setdefault(patch_id, [])
            (after if taken else before)[patch_id].append(report.run_id)
    return [
        PatchStatus(patch_id, tuple(before[patch_id]), tuple(after[patch_id]))
        for patch_id in sorted(before)
    ]
