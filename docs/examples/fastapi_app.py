"""A FastAPI app whose handlers start perdure runs (docs/integrations/fastapi.md).

Run it with ``uvicorn fastapi_app:api`` from this folder (PERDURE_DATABASE_URL
names the database; without it perdure starts its embedded PostgreSQL). The
server runs a worker in its own event loop; more workers can run elsewhere
with ``perdure worker fastapi_app:app``.

- ``POST /reports?wait=5``: a report, answered with its result if it is done
  within 5 s, else ``202`` with the run's URL;
- ``POST /assistant``: a durable Pydantic AI agent that needs approval before
  it sends money; approve with ``POST /runs/{id}/signals/approval``;
- ``GET /runs/{id}`` and ``GET /runs/{id}/streams/{key}`` (Server-Sent Events).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

import perdure
from perdure.integrations import fastapi as perdure_fastapi
from perdure.integrations.pydantic_ai import DurableAgent

app = perdure.App()


@app.workflow("report")
async def report(ctx: perdure.Context, params: dict[str, Any]) -> dict[str, Any]:
    """Count to ``params["n"]``, streaming each number, then return the total."""
    total = 0
    for i in range(1, params["n"] + 1):
        total = await ctx.step(f"add {i}", lambda t, i=i: t + i, total)
        await ctx.write_stream("progress", {"i": i, "total": total})
    return {"total": total}


def banker_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A stand-in for a real model: ask to transfer, then report the outcome."""
    results = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if not results:
        return ModelResponse(parts=[ToolCallPart("transfer", {"amount": 40}, "transfer-1")])
    return ModelResponse(parts=[TextPart(f"Done: {results[-1].content}")])


banker = Agent(FunctionModel(banker_model), name="banker", output_type=[str, DeferredToolRequests])


@banker.tool_plain(requires_approval=True)
def transfer(amount: int) -> str:
    """Send ``amount`` (only once a person approved it)."""
    return f"sent {amount}"


assistant = DurableAgent(app, banker)

api = FastAPI(lifespan=perdure_fastapi.lifespan(app, worker=True, poll_seconds=0.2))
perdure_fastapi.add_error_handlers(api)
api.include_router(perdure_fastapi.router(app))


@api.post("/reports")
async def start_report(request: Request, n: int = 3, wait: float = 0.0) -> JSONResponse:
    """Start a report; wait up to ``wait`` seconds for it."""
    return await perdure_fastapi.start_run(app, request, "report", {"n": n}, wait=wait)


@api.post("/assistant")
async def ask_assistant(request: Request, prompt: str) -> JSONResponse:
    """Start the assistant on ``prompt``; follow it at the returned URL and stream."""
    return await perdure_fastapi.start_run(app, request, assistant.workflow, {"prompt": prompt})
