"""A Pydantic AI agent whose runs are perdure workflow runs.

``DurableAgent(app, agent)`` registers one workflow, ``agent:<name>``. Its
body runs the agent with ``PerdureDurability`` attached, so each model
request and tool call is a step. Around the agent's run, in workflow code:

- progress goes to the run's stream ``events`` (``app.read_stream(run, "events")``):
  each model response, each batch of tool results, each approval request and
  the output, one value each, written once per run however often it replays;
- a run that ends with deferred tool calls (a tool with
  ``requires_approval=True``, or one that raises ``CallDeferred``) waits for
  the signal ``approval`` without holding a worker, then runs the agent again
  with the decisions, as Pydantic AI's human-in-the-loop guide does by hand.
"""

from __future__ import annotations

from typing import Any, Generic

from pydantic_ai import Agent
from pydantic_ai.exceptions import AgentRunError
from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
from pydantic_ai.tools import (
    AgentDepsT,
    DeferredToolRequests,
    DeferredToolResults,
    ToolApproved,
    ToolDenied,
)
from pydantic_core import to_jsonable_python

import perdure

from ._durability import PerdureDurability, RunScope, StepSettings, current_scope

#: The stream a durable agent's run writes its progress to.
EVENTS_STREAM = "events"
#: The signal that carries decisions on deferred tool calls.
APPROVAL_SIGNAL = "approval"


class DurableAgent(Generic[AgentDepsT]):
    """Run a Pydantic AI agent as a perdure workflow; see the module docstring.

    The run's input is ``{"prompt": str, "message_history": [...]}`` (history
    optional, in Pydantic AI's JSON form); its output is ``{"output": ...,
    "messages": [...]}`` with the agent's output as JSON and the whole
    conversation. Deferred tool calls need ``DeferredToolRequests`` among the
    agent's output types, as in Pydantic AI itself.
    """

    def __init__(
        self,
        app: perdure.App,
        agent: Agent[AgentDepsT, Any],
        *,
        name: str | None = None,
        deps: AgentDepsT | None = None,
        model_steps: StepSettings | None = None,
        tool_steps: StepSettings | None = None,
        approval_timeout: float | None = None,
    ) -> None:
        """Wrap ``agent`` and register its workflow ``agent:<name>`` on ``app``.

        ``name`` defaults to the agent's name and must be stable: it is part of
        every recorded step's name. ``deps`` are passed to every run (they are
        not recorded, so give each run what it needs in its prompt or history).
        ``model_steps`` and ``tool_steps`` set perdure's retry policy and
        timeout per step (default: one attempt, leaving retries to the agent).
        ``approval_timeout`` (seconds) bounds the wait for a decision; when it
        passes, the run fails with ``SignalTimeout``.
        """
        name = name or agent.name
        if not name:
            raise perdure.ConfigurationError(
                "a durable agent needs a stable name: give the Agent a name or pass name="
            )
        self.app = app
        self.name = name
        self.workflow = f"agent:{name}"
        self.durability: PerdureDurability[AgentDepsT] = PerdureDurability(
            name=name, model=model_steps, tool=tool_steps
        )
        attached = PerdureDurability.from_agent(agent)
        #: Capabilities to add to each run: none when the agent was built with one.
        self._capabilities = [] if attached is not None else [self.durability]
        self.agent = agent
        self._deps = deps
        self._approval_timeout = approval_timeout
        app.workflow(self.workflow)(self._run)

    async def _run(self, ctx: perdure.Context, params: dict[str, Any]) -> dict[str, Any]:
        """The workflow body: the agent's run, its approvals and its stream."""
        token = current_scope.set(RunScope(ctx))
        try:
            return await self._converse(ctx, params)
        except (AgentRunError, perdure.StepFailed) as exc:
            # The agent's run failed after its own retries; a replay would only
            # fail the same way from the recorded steps, so fail the run now.
            raise perdure.PermanentError(f"{type(exc).__name__}: {exc}") from exc
        finally:
            current_scope.reset(token)

    async def _converse(self, ctx: perdure.Context, params: dict[str, Any]) -> dict[str, Any]:
        prompt: str | None = params.get("prompt")
        history: list[ModelMessage] = ModelMessagesTypeAdapter.validate_python(
            params.get("message_history") or []
        )
        decisions: DeferredToolResults | None = None
        while True:
            async with self.agent.iter(
                prompt,
                message_history=history or None,
                deferred_tool_results=decisions,
                deps=self._deps,  # type: ignore[arg-type]
                capabilities=self._capabilities,
            ) as agent_run:
                async for node in agent_run:
                    await _publish(ctx, node)
                result = agent_run.result
            assert result is not None, "the agent's run ended without a result"
            history = result.all_messages()
            output = result.output
            if not isinstance(output, DeferredToolRequests):
                value = to_jsonable_python(output)
                await ctx.write_stream(EVENTS_STREAM, {"event": "output", "output": value})
                await ctx.close_stream(EVENTS_STREAM)
                return {"output": value, "messages": _dump(history)}
            await ctx.write_stream(
                EVENTS_STREAM,
                {
                    "event": "approval_requested",
                    "approvals": [_call(c) for c in output.approvals],
                    "calls": [_call(c) for c in output.calls],
                },
            )
            answer = await ctx.wait_for_signal(APPROVAL_SIGNAL, timeout=self._approval_timeout)
            decisions = decisions_from(answer, output)
            prompt = None

    def start(
        self,
        prompt: str,
        *,
        message_history: list[ModelMessage] | None = None,
        key: str | None = None,
        **options: Any,
    ) -> perdure.RunHandle:
        """Start a run of the agent on ``prompt``, after ``message_history`` if given.

        ``options`` are those of ``App.start`` (``conn=`` starts it in the
        caller's transaction).
        """
        return self.app.start(self.workflow, _input(prompt, message_history), key=key, **options)

    async def start_async(
        self,
        prompt: str,
        *,
        message_history: list[ModelMessage] | None = None,
        key: str | None = None,
        **options: Any,
    ) -> perdure.RunHandle:
        """Start a run from async code; see ``start``."""
        return await self.app.start_async(
            self.workflow, _input(prompt, message_history), key=key, **options
        )

    def approve(
        self,
        run: str,
        approvals: dict[str, bool | str] | None = None,
        calls: dict[str, Any] | None = None,
        *,
        key: str | None = None,
    ) -> int:
        """Decide a waiting run's deferred tool calls (by tool call id).

        ``approvals`` maps a call id to True (run the tool), False or a reason
        (deny it; the model is told). ``calls`` maps an external call's id to
        its result. The same as ``perdure runs signal RUN approval --data '{"approvals": ...}'``.
        """
        return self.app.signal(run, APPROVAL_SIGNAL, _decision(approvals, calls), key=key)

    async def approve_async(
        self,
        run: str,
        approvals: dict[str, bool | str] | None = None,
        calls: dict[str, Any] | None = None,
        *,
        key: str | None = None,
    ) -> int:
        """Decide a waiting run's deferred tool calls from async code; see ``approve``."""
        return await self.app.signal_async(
            run, APPROVAL_SIGNAL, _decision(approvals, calls), key=key
        )


def _decision(approvals: dict[str, bool | str] | None, calls: dict[str, Any] | None) -> Any:
    """The payload of an approval signal."""
    return {"approvals": approvals or {}, "calls": calls or {}}


def decisions_from(answer: Any, requests: DeferredToolRequests) -> DeferredToolResults:
    """The ``DeferredToolResults`` an approval signal's payload describes.

    A call the payload does not mention is denied for approval calls (with a
    message saying so) and answered with an error for external calls: the
    agent goes on rather than waiting twice.
    """
    if not isinstance(answer, dict):
        answer = {}
    approvals = answer.get("approvals") or {}
    calls = answer.get("calls") or {}
    results = DeferredToolResults()
    for call in requests.approvals:
        decision = approvals.get(call.tool_call_id, False)
        if decision is True:
            results.approvals[call.tool_call_id] = ToolApproved()
        elif isinstance(decision, str):
            results.approvals[call.tool_call_id] = ToolDenied(decision)
        else:
            results.approvals[call.tool_call_id] = ToolDenied("The tool call was not approved.")
    for call in requests.calls:
        results.calls[call.tool_call_id] = calls.get(call.tool_call_id, "No result was given.")
    return results


async def _publish(ctx: perdure.Context, node: Any) -> None:
    """Write what a node of the agent's graph carries: a model response or tool results."""
    if Agent.is_call_tools_node(node):
        message: ModelMessage = node.model_response
        event = "model_response"
    elif Agent.is_model_request_node(node) and any(
        p.part_kind in ("tool-return", "retry-prompt") for p in node.request.parts
    ):
        message = node.request
        event = "tool_results"
    else:
        return
    await ctx.write_stream(EVENTS_STREAM, {"event": event, "parts": _dump_parts(message)})


def _dump_parts(message: ModelMessage) -> Any:
    return to_jsonable_python(message.parts)


def _input(prompt: str, history: list[ModelMessage] | None) -> dict[str, Any]:
    """The run's input: the prompt, and the conversation so far in JSON form."""
    return {"prompt": prompt, "message_history": _dump(history or [])}


def _dump(messages: list[ModelMessage]) -> Any:
    return ModelMessagesTypeAdapter.dump_python(messages, mode="json")


def _call(call: Any) -> dict[str, Any]:
    return {"id": call.tool_call_id, "tool": call.tool_name, "args": call.args_as_dict()}
