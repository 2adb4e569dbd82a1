"""The statements on races of waits (``ctx.wait_first``): ``sql/queries/races.sql``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from perdure.store.rows import Fence, Fenced
from perdure.store.statement import Namespace, Row, Statement


def _none(found: list[Row]) -> None:
    return None


class RaceStatements(Namespace):
    """The statements on races of waits: ``statements.races``."""

    def state(self, fence: Fence, *, position: int) -> Statement[Fenced]:
        """The race's checkpoint at ``position`` now: ``written`` when it is completed
        (an emitter won it), its output as ``payload``, with the statement's time."""
        return self._build("race_state", Fenced.decode, position=position, **fence.params())

    def signal(
        self, fence: Fence, *, position: int, name: str, step_name: str
    ) -> Statement[Fenced]:
        """Consume the oldest pending signal ``name`` for the race at ``position``:
        ``written`` if one was, with its ``payload``."""
        return self._build(
            "race_signal",
            Fenced.decode,
            position=position,
            name=name,
            step_name=step_name,
            **fence.params(),
        )

    def event(
        self,
        fence: Fence,
        *,
        position: int,
        step_name: str,
        name: str,
        match: dict[str, Any],
        since: datetime | None,
        lookback: float,
    ) -> Statement[Fenced]:
        """Take the oldest matching event ``name`` not taken yet for the race at
        ``position``: ``written`` if one was, with the event record as ``payload``."""
        return self._build(
            "race_event",
            Fenced.decode,
            position=position,
            step_name=step_name,
            name=name,
            match=json.dumps(match),
            since=since,
            lookback=lookback,
            **fence.params(),
        )

    def park(
        self,
        fence: Fence,
        *,
        position: int,
        since: datetime | None,
        members: Sequence[tuple[str, str, dict[str, Any], float]],
    ) -> Statement[None]:
        """File the race's event ``members`` ((member, event name, match, lookback), in
        order) for emitters to find, each counting events from ``since`` (None: now)
        minus its lookback."""
        return self._build(
            "race_park",
            _none,
            position=position,
            since=since,
            members=[m[0] for m in members],
            names=[m[1] for m in members],
            matches=[json.dumps(m[2]) for m in members],
            lookbacks=[float(m[3]) for m in members],
            **fence.params(),
        )

    def unpark(self, run_id: str, position: int) -> Statement[None]:
        """Remove the filed event members of the race at ``position`` of run ``run_id``."""
        return self._build("race_unpark", _none, run_id=run_id, position=position)
