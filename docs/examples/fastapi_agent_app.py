"""The FastAPI example (fastapi_app.py) with a durable Pydantic AI agent added.

Needs ``pip install "perdure[fastapi,pydantic-ai]"``. Run it with
``uvicorn fastapi_agent_app:api`` from this folder.

- ``POST /assistant?prompt=...``: a durable agent that needs a person's approval
  before it sends money; approve with ``POST /runs/{id}/signals/approval``;
- and every route of fastapi_app.py (``/reports``, ``/runs/...``).
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse
from fastapi_app import api, app
from pydantic_ai import Agent, DeferredToolRequests
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from perdure.integrations import fastapi as perdure_fastapi
from perdure.integrations.pydantic_ai import DurableAgent

__all__ = ["api", "app"]


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


@api.post("/assistant")
async def ask_assistant(request: Request, prompt: str) -> JSONResponse:
    """Start the assistant on ``prompt``; follow it at the returned URL and stream."""
    return await perdure_fastapi.start_run(app, request, assistant.workflow, {"prompt": prompt})
