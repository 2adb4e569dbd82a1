"""The run filter is written once for every query a RunFilter feeds; cursors round-trip."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from importlib import resources

import pytest

from perdure.api import listing
from perdure.api.filters import RunFilter
from perdure.errors import ConfigurationError
from perdure.store import queries
from perdure.types import Run, RunStatus

RUN_FILTER_QUERIES = (
    "run_list",
    "run_list_archived",
    "run_select",
    "run_count_by_status",
    "run_count_recent",
)


def _runs_sql() -> dict[str, str]:
    """The queries of runs.sql as written, before their fragments are placed."""
    entry = resources.files("perdure.store") / "sql" / "queries" / "runs.sql"
    return queries.parse(entry.read_text(encoding="utf-8"))


@pytest.mark.parametrize("query", RUN_FILTER_QUERIES)
def test_every_query_of_a_run_filter_takes_the_one_written_filter(query: str) -> None:
    assert "{run_filter}" in _runs_sql()[query]
    words = " ".join(queries.fragments()["run_filter"].split())
    assert words in " ".join(queries.load_all()[query].split())


def test_the_written_filter_takes_every_criterion_of_a_run_filter() -> None:
    criteria = RunFilter().params()
    assert set(criteria) >= {"workflow", "tags", "parent", "ids"}
    text = queries.fragments()["run_filter"]
    for name in criteria:
        assert f"%({name})s" in text, name
    # The status is the query's own (a list, a single value, or per counted status).
    assert "%(status)s" not in text and "%(statuses)s" not in text


def _run(created: datetime, run_id: str) -> Run:
    return Run(
        run_id,
        "w",
        1,
        "w",
        None,
        RunStatus.QUEUED,
        None,
        None,
        None,
        None,
        created,
        None,
        None,
        created,
    )


def test_a_cursor_stands_for_the_last_run_of_its_page() -> None:
    created = datetime(2026, 5, 1, 12, 30, 15, 123456, tzinfo=UTC)
    run_id = "01900000-0000-7000-8000-000000000001"
    cursor = listing.encode_cursor(_run(created, run_id))
    assert re.fullmatch(r"[A-Za-z0-9_-]+", cursor)
    assert listing.decode_cursor(cursor) == (created, run_id)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "nope",
        "x" * 300,
        5,
        listing.encode_cursor(_run(datetime(2026, 1, 1), "01900000-0000-7000-8000-000000000001")),
    ],
)
def test_a_cursor_not_given_out_by_a_page_is_refused(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="cursor"):
        listing.decode_cursor(bad)


def test_a_full_last_page_has_no_cursor() -> None:
    created = datetime(2026, 5, 1, tzinfo=UTC)
    runs = [_run(created, f"01900000-0000-7000-8000-00000000000{i}") for i in range(3)]
    assert listing.page(runs, 3).next_cursor is None
    page = listing.page(runs, 2)
    assert list(page) == runs[:2]
    assert listing.decode_cursor(page.next_cursor) == (created, runs[1].id)
