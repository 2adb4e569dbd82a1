"""A map's offloaded results are fetched when read; retention deletes the objects of
what it prunes, and only those.

A run whose map returned many large values holds their references, not their
bytes: ``ctx.map`` (and ``ctx.gather``) returns a sequence that fetches a
result when the workflow reads it, and a result whose object is gone fails
that run alone when it is read. Prune deletes the objects of the history
details of the runs it deletes; an emitted event's payload is plain JSON,
never a reference, so pruning events deletes no object whatever it holds.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

import perdure
from perdure.store.offload import FileObjectStore
from perdure.testing import drain

DB = psycopg.Connection[tuple[Any, ...]]
ABOVE = 64 * 1024
PART = 100 * 1024


class CountingStore(FileObjectStore):
    """A directory store counting the objects read."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.gets = 0

    def get(self, name: str) -> bytes:
        self.gets += 1
        return super().get(name)


def part(index: int) -> str:
    """A text over the offload size, different for each index."""
    unit = f"{index:04d}"
    return unit * (PART // len(unit))


def _register_map(app: perdure.App, items: int) -> None:
    async def piece(index: int) -> str:
        return part(index)

    @app.workflow("pieces")
    async def pieces(ctx: perdure.Context, wait: bool) -> dict[str, Any]:
        results = await ctx.map("piece", piece, range(items))
        if wait:
            await ctx.wait_for_signal("go")
        return {
            "kind": type(results).__name__,
            "count": len(results),
            "third": results[2][:8],
            "last": results[-1][:8],
            "sizes": [len(r) for r in results],
            "equal": results == [part(i) for i in range(items)],
        }

    app.register()


def test_a_map_of_offloaded_results_is_a_sequence_fetching_each_when_read(
    make_app: Callable[..., perdure.App], tmp_path: Path
) -> None:
    store = CountingStore(tmp_path / "objects")
    app = make_app(offload=store, offload_above=ABOVE, max_payload_bytes=4 << 20)
    _register_map(app, 6)
    run = app.start("pieces", False)
    drain(app)
    assert run.result() == {
        "kind": "StepResults",
        "count": 6,
        "third": "00020002",
        "last": "00050005",
        "sizes": [PART] * 6,
        "equal": True,
    }
    # Each result is fetched when read: two single reads, two iterations,
    # nothing fetched for len() or when the map returned.
    assert store.gets == 2 + 6 + 6


def test_a_workflow_may_return_a_map_of_offloaded_results_as_it_is(
    make_app: Callable[..., perdure.App], tmp_path: Path
) -> None:
    app = make_app(offload=f"file://{tmp_path}", offload_above=ABOVE, max_payload_bytes=4 << 20)

    async def piece(index: int) -> str:
        return part(index)

    @app.workflow("returned")
    async def returned(ctx: perdure.Context) -> Any:
        return await ctx.map("piece", piece, range(3))

    app.register()
    run = app.start("returned")
    drain(app)
    assert run.result() == [part(0), part(1), part(2)]


def test_a_map_of_small_results_is_still_a_list(
    make_app: Callable[..., perdure.App], tmp_path: Path
) -> None:
    app = make_app(offload=f"file://{tmp_path}", offload_above=ABOVE)

    async def double(n: int) -> int:
        return 2 * n

    @app.workflow("small_map")
    async def small_map(ctx: perdure.Context) -> list[Any]:
        results = await ctx.map("double", double, range(4))
        return [type(results).__name__, *results]

    app.register()
    run = app.start("small_map")
    drain(app)
    assert run.result() == ["list", 0, 2, 4, 6]
    assert list(tmp_path.iterdir()) == []


def _step_output_object(db: DB, run_id: str, name: str) -> str:
    found = db.execute(
        "SELECT output FROM steps WHERE run_id = %s AND name = %s", (run_id, name)
    ).fetchone()
    assert found is not None
    ref: str = found[0]["$perdure"]["ref"]
    return ref.rsplit("/", 1)[-1]


def test_a_missing_result_object_fails_its_run_alone_when_read(
    make_app: Callable[..., perdure.App], db: DB, tmp_path: Path
) -> None:
    app = make_app(offload=f"file://{tmp_path}", offload_above=ABOVE, max_payload_bytes=4 << 20)
    _register_map(app, 4)
    bad = app.start("pieces", True)
    good = app.start("pieces", True)
    drain(app)
    assert app.get_run(bad.id).status == "waiting"
    (tmp_path / _step_output_object(db, bad.id, "piece[2]")).unlink()
    app.signal(bad.id, "go")
    app.signal(good.id, "go")
    drain(app)

    failed = app.get_run(bad.id)
    assert failed.status == "failed"
    assert failed.error is not None
    assert failed.error["type"] == "perdure.errors.UndecodablePayload"
    assert "'piece[2]'" in failed.error["message"]
    assert "is missing" in failed.error["message"]
    assert app.get_run(good.id).status == "completed"


def _names(root: Path) -> list[str]:
    if not root.exists():
        return []
    return sorted(p.name for p in root.iterdir() if not p.name.startswith("."))


FAILED_ONCE: set[str] = set()


def test_prune_deletes_the_objects_of_the_history_details_of_the_runs_it_deletes(
    make_app: Callable[..., perdure.App], db: DB, tmp_path: Path
) -> None:
    # Every payload offloaded, history details included (a retry's detail).
    app = make_app(offload=f"file://{tmp_path}", offload_above=0)

    async def flaky(key: str) -> str:
        if key not in FAILED_ONCE:
            FAILED_ONCE.add(key)
            raise RuntimeError("once")
        return "ok"

    @app.workflow("retried")
    async def retried(ctx: perdure.Context, key: str) -> str:
        retry = perdure.RetryPolicy(max_attempts=2, initial_delay=0.0, jitter=0.0)
        result: str = await ctx.step("flaky", flaky, key, retry=retry)
        return result

    app.register()
    run = app.start("retried", f"{tmp_path}")
    drain(app)
    assert run.result() == "ok"
    details = db.execute(
        "SELECT detail -> '$perdure' ->> 'ref' FROM history"
        " WHERE run_id = %s AND detail -> '$perdure' ? 'ref'",
        (run.id,),
    ).fetchall()
    assert details, "no history detail of the run was offloaded"
    in_history = {ref.rsplit("/", 1)[-1] for (ref,) in details}
    assert in_history <= set(_names(tmp_path))

    result = app.prune(datetime.now(UTC) + timedelta(hours=1))
    assert result.runs == 1
    assert _names(tmp_path) == []


def test_pruning_events_deletes_no_object_an_event_payload_names(
    make_app: Callable[..., perdure.App], tmp_path: Path
) -> None:
    app = make_app(offload=f"file://{tmp_path}", offload_above=ABOVE, max_payload_bytes=4 << 20)
    store = app.payloads.offload.store  # type: ignore[union-attr]
    store.put("precious", b'"kept"')
    forged = {
        "$perdure": {
            "v": 1,
            "ref": store.url + "/precious",
            "sha256": hashlib.sha256(b'"kept"').hexdigest(),
            "size": 6,
        }
    }
    app.emit("forged", forged)
    app.emit("large", {"text": part(1) * 2})
    assert _names(tmp_path) == ["precious"]  # an event's payload stays in its row

    result = app.prune(datetime.now(UTC) + timedelta(hours=1))
    assert result.events == 2
    assert _names(tmp_path) == ["precious"]
    assert store.get("precious") == b'"kept"'
