"""A durable Pydantic AI agent for the crash test: every model request and tool call leaves a row.

The model (a ``FunctionModel``) asks for ``lookup``, then ``slow``, then
answers. Each model request and each tool call writes ``agent_ledger(run_id,
call, pid)`` by plain SQL outside perdure when it starts, so the table counts
executions, including one a crash cut short. ``slow`` then works for
``AGENT_SLOW_SECONDS``: the test kills the worker in there.
"""

from __future__ import annotations

import os
import time

import psycopg
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

import perdure
from perdure.integrations.pydantic_ai import DurableAgent

app = perdure.App()


def _ledger(call: str, run_id: str) -> None:
    schema = os.environ["PERDURE_SCHEMA"]
    with psycopg.connect(os.environ["PERDURE_DATABASE_URL"], autocommit=True) as conn:
        conn.execute(
            f"INSERT INTO {schema}.agent_ledger (run_id, call, pid) VALUES (%s, %s, %s)",
            (run_id, call, os.getpid()),
        )


def _run_id(messages: list[ModelMessage]) -> str:
    """The perdure run's id, from the agent run's id (``<run id>:<n>``)."""
    run_id = messages[-1].run_id
    assert run_id is not None
    return run_id.split(":")[0]


def _tool_run_id(ctx: RunContext[None]) -> str:
    assert ctx.run_id is not None
    return ctx.run_id.split(":")[0]


def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """lookup -> slow -> answer, decided by how many tool results came back."""
    returns = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    _ledger(f"model:{len(returns)}", _run_id(messages))
    if not returns:
        return ModelResponse(parts=[ToolCallPart("lookup", {"city": "Oslo"}, "call-lookup")])
    if len(returns) == 1:
        return ModelResponse(parts=[ToolCallPart("slow", {"city": "Oslo"}, "call-slow")])
    return ModelResponse(parts=[TextPart(f"Oslo: {returns[0].content}, {returns[1].content}")])


agent = Agent(FunctionModel(model), name="forecaster")


@agent.tool
def lookup(ctx: RunContext[None], city: str) -> str:
    """Look the city up."""
    _ledger("tool:lookup", _tool_run_id(ctx))
    return f"{city} is in Norway"


@agent.tool
def slow(ctx: RunContext[None], city: str) -> str:
    """Record the start, then work for AGENT_SLOW_SECONDS: a crash lands in here."""
    _ledger("tool:slow", _tool_run_id(ctx))
    time.sleep(float(os.environ.get("AGENT_SLOW_SECONDS", "0")))
    return "snow"


forecaster = DurableAgent(app, agent)
