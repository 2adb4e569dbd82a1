"""Durable Pydantic AI agents: a run of the agent is a perdure workflow run.

Install with ``pip install "perdure[pydantic-ai]"``; see docs/durable-agents.md.
"""

from __future__ import annotations

from ._agent import APPROVAL_SIGNAL, EVENTS_STREAM, DurableAgent, decisions_from
from ._durability import PerdureDurability, StepSettings

__all__ = [
    "APPROVAL_SIGNAL",
    "EVENTS_STREAM",
    "DurableAgent",
    "PerdureDurability",
    "StepSettings",
    "decisions_from",
]
