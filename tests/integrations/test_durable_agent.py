"""Durable Pydantic AI agents in one process: steps, approvals, streams, cancellation, retries."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import pytest
from click.testing import CliRunner
from pydantic_ai import Agent, DeferredToolRequests, ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from starlette.testclient import TestClient

import perdure
from perdure.cli.main import cli
from perdure.dashboard import DashboardConfig, create_app
from perdure.integrations.pydantic_ai import DurableAgent


def _tool_results(messages: list[ModelMessage]) -> list[Any]:
    return [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart | RetryPromptPart)]


def _transfer_agent(calls: list[str]) -> Agent[None, Any]:
    """Asks for a transfer that needs approval, then reports what came back."""

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append("model")
        results = _tool_results(messages)
        if not results:
            return ModelResponse(parts=[ToolCallPart("transfer", {"amount": 40}, "call-1")])
        return ModelResponse(parts=[TextPart(f"done: {results[-1].content}")])

    agent = Agent(FunctionModel(model), name="banker", output_type=[str, DeferredToolRequests])

    @agent.tool_plain(requires_approval=True)
    def transfer(amount: int) -> str:
        calls.append("transfer")
        return f"sent {amount}"

    return agent


def test_each_model_request_and_tool_call_is_a_step_replayed_from_its_record(
    app: perdure.App,
) -> None:
    calls: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append("model")
        if not _tool_results(messages):
            return ModelResponse(parts=[ToolCallPart("double", {"n": 21}, "call-1")])
        return ModelResponse(
            parts=[TextPart(f"the answer is {_tool_results(messages)[0].content}")]
        )

    agent = Agent(FunctionModel(model), name="doubler")

    @agent.tool_plain
    def double(n: int) -> int:
        calls.append("double")
        return 2 * n

    durable = DurableAgent(app, agent)
    handle = durable.start("Double 21")
    result = app.run_until_complete(handle)

    assert result["output"] == "the answer is 42"
    assert calls == ["model", "double", "model"]
    steps = [s.name for s in app.steps(handle.id) if not s.name.startswith("stream:")]
    assert steps == [
        "doubler__model.request",
        "doubler__function_toolset__<agent>.call_tool:double",
        "doubler__model.request",
    ]
    # The conversation comes back whole, in Pydantic AI's JSON form.
    assert [m["kind"] for m in result["messages"]] == ["request", "response", "request", "response"]
    # A later run goes on from the conversation so far.
    history = ModelMessagesTypeAdapter.validate_python(result["messages"])
    again = app.run_until_complete(durable.start("And again?", message_history=history))
    assert len(again["messages"]) == len(result["messages"]) + 2
    # Outside a run the same agent is an ordinary agent.
    assert asyncio.run(agent.run("Double 21")).output == "the answer is 42"


def test_a_tool_needing_approval_waits_for_the_signal_then_runs_once(
    app: perdure.App, pg_url: str, schema: str
) -> None:
    calls: list[str] = []
    durable = DurableAgent(app, _transfer_agent(calls))
    handle = durable.start("Send 40")
    with pytest.raises(perdure.ResultTimeout):
        app.run_until_complete(handle)

    run = app.get_run(handle.id)
    assert run.status == perdure.RunStatus.WAITING  # no worker is held while it waits
    # The stream has the model's response, then the request for approval.
    streamed = list(itertools.islice(app.read_stream(handle.id, "events", timeout=10), 2))
    assert streamed[0]["event"] == "model_response"
    assert streamed[1] == {
        "event": "approval_requested",
        "approvals": [{"id": "call-1", "tool": "transfer", "args": {"amount": 40}}],
        "calls": [],
    }
    assert calls == ["model"]

    # The approval arrives from the command line, as any signal does.
    result = CliRunner().invoke(
        cli,
        [
            "--database-url",
            pg_url,
            "--schema",
            schema,
            "runs",
            "signal",
            handle.id,
            "approval",
            "--data",
            json.dumps({"approvals": {"call-1": True}}),
        ],
        catch_exceptions=False,
    )
    assert result.exit_code == 0, result.output
    assert app.run_until_complete(handle)["output"] == "done: sent 40"
    # The first model request was replayed from its record, not asked again.
    assert calls == ["model", "transfer", "model"]


def test_a_denied_tool_call_does_not_run_and_the_model_is_told(app: perdure.App) -> None:
    calls: list[str] = []
    durable = DurableAgent(app, _transfer_agent(calls))
    handle = durable.start("Send 40")
    with pytest.raises(perdure.ResultTimeout):
        app.run_until_complete(handle)
    durable.approve(handle.id, {"call-1": "over the limit"})
    assert app.run_until_complete(handle)["output"] == "done: over the limit"
    assert "transfer" not in calls


def test_the_approval_can_come_from_the_dashboards_signal_form(app: perdure.App) -> None:
    calls: list[str] = []
    durable = DurableAgent(app, _transfer_agent(calls))
    handle = durable.start("Send 40")
    with pytest.raises(perdure.ResultTimeout):
        app.run_until_complete(handle)
    with TestClient(create_app(app, DashboardConfig()), base_url="http://127.0.0.1") as client:
        page = client.get(f"/runs/{handle.id}")
        assert "approval" in page.text  # the page says which signal the run waits for
        csrf = client.cookies.get("perdure_csrf")
        sent = client.post(
            f"/runs/{handle.id}/signal",
            data={
                "csrf": csrf,
                "name": "approval",
                "payload": json.dumps({"approvals": {"call-1": True}}),
            },
            follow_redirects=False,
        )
        assert sent.status_code == 303, sent.text
    assert app.run_until_complete(handle)["output"] == "done: sent 40"
    assert calls == ["model", "transfer", "model"]


def test_cancelling_a_run_that_waits_for_approval_ends_it_without_running_the_tool(
    app: perdure.App,
) -> None:
    calls: list[str] = []
    durable = DurableAgent(app, _transfer_agent(calls))
    handle = durable.start("Send 40")
    with pytest.raises(perdure.ResultTimeout):
        app.run_until_complete(handle)
    app.cancel(handle.id, reason="customer left")
    with pytest.raises(perdure.RunCancelled):
        app.run_until_complete(handle)
    assert app.get_run(handle.id).status == perdure.RunStatus.CANCELLED
    assert "transfer" not in calls


def test_a_tool_asking_the_model_to_retry_uses_the_agents_own_retry_settings(
    app: perdure.App,
) -> None:
    calls: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append("model")
        results = _tool_results(messages)
        if results and "found it" in str(results[-1].content):
            return ModelResponse(parts=[TextPart("found it")])
        page = len(results)
        return ModelResponse(parts=[ToolCallPart("fetch", {"page": page}, f"c{page}")])

    agent = Agent(FunctionModel(model), name="fetcher", retries=3)

    @agent.tool_plain
    def fetch(page: int) -> str:
        calls.append(f"fetch:{page}")
        if page < 2:
            raise ModelRetry("try the next page")
        return "found it"

    durable = DurableAgent(app, agent)
    assert app.run_until_complete(durable.start("Find it"))["output"] == "found it"
    assert calls == ["model", "fetch:0", "model", "fetch:1", "model", "fetch:2", "model"]

    # Past the tool's retries the agent gives up, and so does the run.
    agent_strict = Agent(FunctionModel(model), name="strict", retries=1)

    @agent_strict.tool_plain
    def fetch_strict(page: int) -> str:
        raise ModelRetry("never")

    def strict_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("fetch_strict", {"page": 0})])

    strict = DurableAgent(
        app, Agent(FunctionModel(strict_model), name="strict", retries=1, tools=[fetch_strict])
    )
    with pytest.raises(perdure.RunFailed, match="exceeded max retries"):
        app.run_until_complete(strict.start("Find it"))


def test_an_agent_without_a_name_is_refused(app: perdure.App) -> None:
    with pytest.raises(perdure.ConfigurationError, match="stable name"):
        DurableAgent(app, Agent(FunctionModel(lambda m, i: ModelResponse(parts=[]))))


def test_cancelling_mid_run_stops_the_agent_before_its_next_model_request(
    app: perdure.App,
) -> None:
    calls: list[str] = []

    def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append("model")
        if not _tool_results(messages):
            return ModelResponse(parts=[ToolCallPart("hang_up", {}, "call-1")])
        return ModelResponse(parts=[TextPart("still here")])

    agent = Agent(FunctionModel(model), name="caller")
    durable = DurableAgent(app, agent)

    @agent.tool_plain
    def hang_up() -> str:
        calls.append("hang_up")
        app.cancel(handle.id, reason="the caller hung up")  # while the tool runs
        return "bye"

    handle = durable.start("Call")
    with pytest.raises(perdure.RunCancelled):
        app.run_until_complete(handle)
    assert app.get_run(handle.id).status == perdure.RunStatus.CANCELLED
    assert calls == ["model", "hang_up"]
