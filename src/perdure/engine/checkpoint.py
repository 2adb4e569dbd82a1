"""One attempt at a step, and the checkpoint record that writes its outcome."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from perdure.store.rows import Fence
from perdure.store.writes import Checkpoint


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt at one step: where it is, which try it is, when it began."""

    position: int
    name: str
    kind: str
    #: 1 on the first try.
    number: int
    started: datetime

    def outcome(
        self,
        fence: Fence,
        status: str,
        output_json: str | None,
        error_json: str | None = None,
        *,
        lease_seconds: float = 0.0,
        event_key: str | None = None,
        stream_seq: int | None = None,
        stream_closed: bool = False,
        ends_task: bool = False,
    ) -> Checkpoint:
        """This attempt's outcome with ``status`` as the checkpoint record fenced on
        ``fence``: the lease it extends, what it publishes, whether it ends its task
        (a step task's final checkpoint, which wakes the run at once on a failure)."""
        return Checkpoint(
            fence,
            self.position,
            self.name,
            self.kind,
            status,
            self.number,
            self.started,
            output_json,
            error_json,
            lease_seconds=lease_seconds,
            event_key=event_key,
            stream_seq=stream_seq,
            stream_closed=stream_closed,
            ends_task=ends_task,
            wake=ends_task and status == "failed",
        )
