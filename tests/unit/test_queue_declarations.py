"""Queue declarations and limits, checked before anything touches the database."""

from __future__ import annotations

from typing import Any

import pytest

import perdure
from perdure.api.queues import UNSET, QueueDef
from perdure.cli.queues import parse_limit
from perdure.clock import Clock
from perdure.store.statements import Statements


def test_a_declaration_records_only_the_settings_it_states() -> None:
    app = perdure.App("postgresql://unused")
    both = app.queue("media", concurrency=2, worker_concurrency=1)
    assert both.limits() == {"concurrency": 2, "worker_concurrency": 1}
    assert app.queue("thumbs", concurrency=3).limits() == {"concurrency": 3}
    assert app.queue("bulk", worker_concurrency=None).limits() == {"worker_concurrency": None}
    assert app.queue("plain").limits() == {}


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "2", [2]])
@pytest.mark.parametrize("setting", ["concurrency", "worker_concurrency"])
def test_a_limit_must_be_a_whole_number_of_at_least_one(setting: str, bad: Any) -> None:
    app = perdure.App("postgresql://unused")
    with pytest.raises(perdure.ConfigurationError, match=f"queue 'media': {setting} must be"):
        app.queue("media", **{setting: bad})


@pytest.mark.parametrize("bad", ["", "has space", "1starts-with-digit", "x" * 129, None, 3])
def test_a_queue_name_is_validated_like_a_workflow_name(bad: Any) -> None:
    app = perdure.App("postgresql://unused")
    with pytest.raises(perdure.WorkflowDefinitionError, match="invalid queue name"):
        app.queue(bad, concurrency=1)


def test_declaring_a_queue_twice_is_refused_unless_the_settings_agree() -> None:
    app = perdure.App("postgresql://unused")
    first = app.queue("media", concurrency=2)
    assert app.queue("media", concurrency=2) == first
    with pytest.raises(perdure.WorkflowDefinitionError, match="declared twice"):
        app.queue("media", concurrency=3)
    with pytest.raises(perdure.WorkflowDefinitionError, match="declared twice"):
        app.queue("media", concurrency=2, worker_concurrency=1)


def test_set_queue_needs_a_setting_and_validates_before_connecting() -> None:
    app = perdure.App("postgresql://unused")
    with pytest.raises(perdure.ConfigurationError, match="needs concurrency"):
        app.set_queue("media")
    with pytest.raises(perdure.ConfigurationError, match="must be an integer from 1"):
        app.set_queue("media", concurrency=0)
    with pytest.raises(perdure.WorkflowDefinitionError):
        app.set_queue("bad name", concurrency=1)


def test_the_store_refuses_unknown_settings() -> None:
    statements = Statements("perdure", Clock())
    with pytest.raises(perdure.ConfigurationError, match="unknown queue settings: priority"):
        statements.queues.set("media", {"priority": 1})
    stmt = statements.queues.set("media", {"worker_concurrency": None})
    assert stmt.params["set_worker_concurrency"] is True
    assert stmt.params["set_concurrency"] is False


def test_unset_is_not_none() -> None:
    assert QueueDef("q").concurrency is UNSET
    assert QueueDef("q", concurrency=None).limits() == {"concurrency": None}


@pytest.mark.parametrize(
    ("text", "limit"), [("1", 1), ("12", 12), ("none", None), ("None", None), ("unlimited", None)]
)
def test_the_cli_reads_a_limit_or_none(text: str, limit: int | None) -> None:
    assert parse_limit(text) == limit


@pytest.mark.parametrize("text", ["0", "-2", "1.5", "two", ""])
def test_the_cli_refuses_other_limits(text: str) -> None:
    with pytest.raises(ValueError):
        parse_limit(text)
