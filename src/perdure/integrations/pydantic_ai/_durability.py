"""The Pydantic AI capability that turns an agent's I/O into perdure steps.

Pydantic AI's durable-execution surface (``pydantic_ai.durable_exec``) funnels
every operation with side effects (a model request, a tool call, an MCP tool
listing) through one backend call: ``execute(name, body)``. Here that call is
``ctx.step(name, body)`` on the perdure run the agent runs in. A step's output
is recorded once, so when a worker dies and another replays the run, every
request and call that completed returns its recorded result and runs no more.

Payloads cross as JSON (the ``JSON_CODEC``): perdure records step outputs as
JSONB. Tool calls run one after another inside a run, because a run's steps
are recorded by position and parallel calls would not replay in one order.
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal

from pydantic_ai.durable_exec import (
    JSON_CODEC,
    BaseDurabilityCapability,
    DurabilityEngineSpec,
    DurableOperationBackend,
    DurableOperationId,
    JournalCallableOperationBackend,
    RoleBasedOperationConfig,
    conversation_id_from_run_id,
)
from pydantic_ai.tools import AgentDepsT

import perdure


@dataclass
class RunScope:
    """The perdure run an agent runs in, and how many agent runs it began so far."""

    ctx: perdure.Context
    agent_runs: int = 0


#: Set by the workflow around the agent's runs; unset, the agent is not durable.
current_scope: contextvars.ContextVar[RunScope | None] = contextvars.ContextVar(
    "perdure_agent_scope", default=None
)

#: One attempt: a failed model request or tool call is not retried by perdure,
#: so the agent's own settings (model client retries, a tool's ``retries``) rule.
SINGLE_ATTEMPT = perdure.RetryPolicy(max_attempts=1)


@dataclass(frozen=True)
class StepSettings:
    """How perdure runs one kind of operation: its retry policy and timeout (seconds)."""

    retry: perdure.RetryPolicy = SINGLE_ATTEMPT
    timeout: float | None = None


class _StepBackend(JournalCallableOperationBackend[StepSettings]):
    """Run each durable operation as a perdure step of the current run."""

    async def execute(
        self,
        *,
        operation_id: DurableOperationId,
        name: str,
        body: Callable[[], Awaitable[object]],
        cache_key: tuple[object, ...],
        config: StepSettings,
    ) -> object:
        scope = current_scope.get()
        if scope is None:  # outside a perdure run the agent behaves as it always does
            return await body()
        return await scope.ctx.step(name, body, retry=config.retry, timeout=config.timeout)


class PerdureDurability(BaseDurabilityCapability[AgentDepsT]):
    """Make an agent's model requests and tool calls perdure steps while it runs in a run.

    Attach it with ``DurableAgent``
    (which also defines the workflow); outside a perdure run it does nothing.
    """

    engine_spec = DurabilityEngineSpec(
        engine_name="perdure",
        durable_unit_noun="step",
        durable_unit_plural="steps",
        durable_container_noun="run",
        codec=JSON_CODEC,
        unsupported_runtime_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        wrapped_toolset_kinds=frozenset({"function", "mcp", "dynamic"}),
        toolset_lifecycles={
            "function": "enter-always",
            "mcp": "enter-in-durable-unit",
            "dynamic": "enter-never",
        },
        tool_call_result_upgrade_lenient=False,
        journal_discovery=True,
        sequential_tools_in_durable_context=True,
        tool_config_key="perdure",
        cancellation_error_types=(perdure.Cancelled,),
    )

    def __init__(
        self,
        *,
        name: str | None = None,
        model: StepSettings | None = None,
        tool: StepSettings | None = None,
    ) -> None:
        """Durability for the agent named ``name`` (default: the agent's own name).

        ``model`` and ``tool`` set how perdure runs model requests and tool
        calls; by default each runs once per attempt of the agent's own retry
        logic (perdure adds no retries of its own).
        """
        super().__init__(name=name)
        self._model_settings = model or StepSettings()
        self._tool_settings = tool or StepSettings()

    @property
    def in_durable_context(self) -> bool:
        """Whether the agent runs inside a perdure run right now."""
        return current_scope.get() is not None

    def get_default_run_id(self) -> str | None:
        """The agent run's id: the perdure run's id and a count, the same on every replay."""
        scope = current_scope.get()
        if scope is None:
            return None
        scope.agent_runs += 1
        return f"{scope.ctx.run_id}:{scope.agent_runs}"

    def get_default_conversation_id(self, run_id: str) -> str | None:
        """A conversation id derived from the replay-stable run id."""
        return conversation_id_from_run_id(run_id) if self.in_durable_context else None

    def get_durable_operation_backend(self) -> DurableOperationBackend[StepSettings]:
        """The backend that runs operations as ``ctx.step`` calls."""
        tool = self._tool_settings

        def resolve_tool(
            operation_id: DurableOperationId, tool_def: object | None, tool_name: str
        ) -> StepSettings | Literal[False]:
            return tool

        return _StepBackend(
            agent_name=self.name,
            default_model_id=self.default_model_id,
            config=RoleBasedOperationConfig(
                model=self._model_settings,
                event=self._model_settings,
                capability=self._model_settings,
                tool=tool,
                resolve_tool=resolve_tool,
            ),
        )
