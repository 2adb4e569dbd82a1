"""A schedule that ticks every second, for the exactly-once test with worker processes.

Every worker declares the same schedule and records it when it starts; each
run returns the tick it covers (``ctx.scheduled_at``).
"""

from __future__ import annotations

import perdure

app = perdure.App()


@app.schedule("* * * * * *", name="beat")  # six fields: seconds last, every second
@app.workflow("beat")
def beat(ctx: perdure.SyncContext, input: None) -> str | None:
    """Return the tick this run covers."""
    return ctx.scheduled_at.isoformat() if ctx.scheduled_at else None
