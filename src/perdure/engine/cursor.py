"""The replay cursor of one execution: the recorded history, the position, the guard.

Every ``ctx`` call takes the next position from the cursor. When the history
holds a checkpoint at that position, the cursor hands it back; when the
recorded step has another name or kind than the one the code asks for, the
determinism guard raises ``NonDeterminismError`` (and remembers it: the run
must stop for good even if the workflow catches it). The cursor does no I/O:
it is what ``perdure check-replay`` drives alone, with no store at all.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from perdure.errors import NonDeterminismError, StepFailed
from perdure.types import Step, StepStatus


@dataclass
class ReplayCursor:
    """Where a run's replay is in its recorded history, and whether it diverged."""

    run_id: str
    workflow: str
    version: int
    #: The recorded checkpoints, by position.
    history: dict[int, Step] = field(default_factory=dict)
    #: The next position a ``ctx`` call takes.
    position: int = 0
    #: The position and name of the last step asked for.
    requested: tuple[int, str] = (0, "")
    #: Set once the code asked for another step than the one recorded.
    diverged: NonDeterminismError | None = None
    #: What ``ctx.patched`` answered, by patch id: True where the run takes the
    #: new code (its marker recorded), False where its history predates the patch.
    patches: dict[str, bool] = field(default_factory=dict)

    @classmethod
    def of(cls, run_id: str, workflow: str, version: int, steps: Iterable[Step]) -> ReplayCursor:
        """A cursor at the start of ``steps``, the run's recorded checkpoints."""
        return cls(run_id, workflow, version, {s.position: s for s in steps})

    def advance(self, name: str, kind: str = "step") -> tuple[int, Step | None]:
        """Take the next position for step ``name``: its checkpoint, if any; the guard."""
        position = self.position
        self.position += 1
        self.requested = (position, name)
        recorded = self.history.get(position)
        if recorded is not None and (recorded.name != name or recorded.kind != kind):
            self.diverged = NonDeterminismError(
                run_id=self.run_id,
                workflow=self.workflow,
                version=self.version,
                position=position,
                recorded=recorded.name,
                requested=name,
            )
            raise self.diverged
        return position, recorded

    def patch(self, patch_id: str, marker: str) -> bool | None:
        """Whether the history took patch ``patch_id`` here: True if its ``marker``
        is recorded at the position (taken), False if another checkpoint is (the
        history predates the patch), None if nothing is recorded yet (new code).

        The first answer for a patch id holds for the rest of the execution.
        """
        if patch_id in self.patches:
            return self.patches[patch_id]
        recorded = self.history.get(self.position)
        if recorded is None:
            return None
        taken = self.skip_marker(marker)
        self.patches[patch_id] = taken
        return taken

    def skip_marker(self, marker: str) -> bool:
        """Take the position if a patch's ``marker`` is recorded there; whether it was."""
        recorded = self.history.get(self.position)
        if recorded is None or recorded.name != marker or recorded.kind != "step":
            return False
        self.requested = (self.position, marker)
        self.position += 1
        return True

    def jump(self, position: int) -> None:
        """Move to ``position`` (a step task goes straight to its own step)."""
        self.position = position

    def at(self, position: int) -> Step | None:
        """The checkpoint recorded at ``position``, if any."""
        return self.history.get(position)

    def unreached(self) -> list[Step]:
        """The recorded checkpoints at or after the cursor, in position order."""
        return sorted(
            (s for s in self.history.values() if s.position >= self.position),
            key=lambda s: s.position,
        )

    def replayed(self, recorded: Step) -> object:
        """A recorded final checkpoint's output, or its failure raised (StepFailed)."""
        if recorded.status == StepStatus.COMPLETED:
            return recorded.output
        raise recorded_failure(recorded)


def recorded_failure(recorded: Step) -> StepFailed:
    """The StepFailed a failed step's checkpoint records."""
    error = recorded.error or {}
    return StepFailed(
        recorded.name,
        str(error.get("type", "Error")),
        str(error.get("message", "")),
        recorded.attempts,
        error.get("traceback"),
    )
