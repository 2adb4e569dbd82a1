"""Graph workflows: definition checks, parallel execution, conditions, gates, compensation."""

from __future__ import annotations

import re
import threading
import time
from typing import Any

import pytest

import perdure
from helpers import BackgroundWorker, wait_until
from perdure import testing

FAST = {"concurrency": 8, "poll_seconds": 0.05, "lease_seconds": 5}


def test_etl_graph_passes_outputs_along_and_records_the_definition(app: perdure.App) -> None:
    etl = app.graph("nightly_etl", version=1)

    @etl.step()
    def extract(ctx: perdure.StepContext, input: dict[str, int]) -> list[int]:
        return list(range(input["n"]))

    @etl.step(depends_on=[extract], retry=perdure.RetryPolicy(max_attempts=5))
    def transform(ctx: perdure.StepContext, extracted: list[int]) -> dict[str, Any]:
        return {"rows": len(extracted), "total": sum(extracted)}

    @etl.step(depends_on=[transform], when=lambda out: out["rows"] > 0)
    async def load(ctx: perdure.StepContext, transformed: dict[str, Any]) -> str:
        return f"loaded {transformed['rows']} rows for run {ctx.run_id[:8]}"

    handle = app.start("nightly_etl", {"n": 4})
    with BackgroundWorker(app, **FAST):
        out = handle.result(timeout=30)
    assert out == {"load": f"loaded 4 rows for run {handle.id[:8]}"}
    steps = app.steps(handle.id)
    assert [(s.position, s.name, s.status.value) for s in steps] == [
        (0, "extract", "completed"),
        (1, "transform", "completed"),
        (2, "load", "completed"),
    ]
    info = {w.name: w for w in app.workflows()}["nightly_etl"]
    assert info.kind == "graph"


def test_registry_row_holds_steps_edges_and_fingerprint(
    app: perdure.App, db: Any, schema: str
) -> None:
    g = app.graph("drawn")

    @g.step()
    def a(ctx: perdure.StepContext, x: int) -> int:
        return x

    @g.step(depends_on=[a], compensate=lambda ctx, out: None, wait_for_signal="approve")
    def b(ctx: perdure.StepContext, x: int) -> int:
        return x

    app.register()
    row = db.execute(
        f"SELECT kind, definition, fingerprint FROM {schema}.workflows WHERE name = 'drawn'"
    ).fetchone()
    kind, definition, fingerprint = row
    assert kind == "graph" and len(fingerprint) == 16
    assert definition["edges"] == [["a", "b"]]
    assert [s["name"] for s in definition["steps"]] == ["a", "b"]
    assert definition["steps"][1]["signal"] == "approve"
    assert definition["steps"][1]["compensate"] == "<lambda>"


def test_condition_false_skips_the_step_and_its_dependents(app: perdure.App) -> None:
    g = app.graph("conditional")

    @g.step()
    def count(ctx: perdure.StepContext, n: int) -> dict[str, int]:
        return {"rows": n}

    @g.step(depends_on=[count], when=lambda out: out["rows"] > 0)
    def load(ctx: perdure.StepContext, out: dict[str, int]) -> str:
        return "loaded"

    @g.step(depends_on=[load])
    def report(ctx: perdure.StepContext, loaded: str) -> str:
        return "reported"

    @g.step(depends_on=[count, load], join="any")
    def audit(ctx: perdure.StepContext, outs: dict[str, Any]) -> list[str]:
        return sorted(outs)

    empty = app.start("conditional", 0)
    full = app.start("conditional", 3)
    with BackgroundWorker(app, **FAST):
        assert empty.result(timeout=30) == {"audit": ["count"]}
        assert full.result(timeout=30) == {"report": "reported", "audit": ["count", "load"]}
    statuses = {s.name: s.status.value for s in app.steps(empty.id)}
    assert statuses == {
        "count": "completed",
        "load": "skipped",
        "report": "skipped",
        "audit": "completed",
    }
    reasons = {s.name: (s.error or {}).get("reason") for s in app.steps(empty.id)}
    assert reasons["load"] == "its condition was false"
    assert reasons["report"] == "a dependency was skipped"


def test_a_condition_that_raises_fails_its_step_and_the_run(app: perdure.App) -> None:
    g = app.graph("broken_condition")

    @g.step()
    def count(ctx: perdure.StepContext, n: int) -> dict[str, int]:
        return {"rows": n}

    @g.step(depends_on=[count], when=lambda out: out["missing"] > 0)
    def load(ctx: perdure.StepContext, out: dict[str, int]) -> str:
        return "loaded"

    handle = app.start("broken_condition", 3)
    testing.drain(app)
    assert handle.status() == perdure.RunStatus.FAILED
    load_step = next(s for s in app.steps(handle.id) if s.name == "load")
    assert load_step.status == perdure.StepStatus.FAILED and load_step.error is not None
    assert "the condition of step 'load' raised" in load_step.error["message"]


def test_approval_gate_waits_for_a_signal_inside_the_graph(app: perdure.App) -> None:
    g = app.graph("approval_flow")

    @g.step()
    def draft(ctx: perdure.StepContext, doc: str) -> str:
        return doc.upper()

    @g.step(depends_on=[draft], wait_for_signal="approve")
    def publish(ctx: perdure.StepContext, text: str) -> dict[str, Any]:
        return {"text": text, "by": ctx.signal["by"]}

    handle = app.start("approval_flow", "hello")
    with BackgroundWorker(app, **FAST) as worker:
        wait_until(lambda: handle.status() == "waiting", 20, what="the gate to park")
        run = handle.get()
        assert run.waiting_for is not None and run.waiting_for["signal"] == "approve"
        assert run.waiting_for["step"] == "publish"
        wait_until(lambda: worker.worker.running == {}, 20, what="the worker to hold nothing")
        steps = {s.name: s.status.value for s in app.steps(handle.id)}
        assert steps == {"draft": "completed", "publish": "waiting"}
        app.signal(handle.id, "approve", {"by": "ada"})
        assert handle.result(timeout=30) == {"publish": {"text": "HELLO", "by": "ada"}}


def test_gate_timeout_fails_the_step(app: perdure.App) -> None:
    g = app.graph("impatient")

    @g.step(wait_for_signal="go", signal_timeout=0.3)
    def wait(ctx: perdure.StepContext, _: Any) -> str:
        return "went"

    handle = app.start("impatient")
    with BackgroundWorker(app, **FAST):
        with pytest.raises(perdure.RunFailed) as info:
            handle.result(timeout=30)
    assert info.value.error["type"] == "perdure.errors.SignalTimeout"
    assert {s.name: s.status.value for s in app.steps(handle.id)} == {"wait": "failed"}


def test_diamond_steps_overlap_in_one_worker_and_the_join_sees_both(app: perdure.App) -> None:
    both_started = threading.Barrier(2, timeout=20)
    g = app.graph("diamond")

    @g.step()
    def a(ctx: perdure.StepContext, x: int) -> int:
        return x

    @g.step(depends_on=[a])
    def b(ctx: perdure.StepContext, x: int) -> int:
        both_started.wait()  # fails unless c runs at the same time
        return x + 1

    @g.step(depends_on=[a])
    def c(ctx: perdure.StepContext, x: int) -> int:
        both_started.wait()
        return x + 2

    @g.step(depends_on=[b, c])
    def d(ctx: perdure.StepContext, outs: dict[str, int]) -> dict[str, int]:
        return outs

    handle = app.start("diamond", 1)
    with BackgroundWorker(app, **FAST):
        assert handle.result(timeout=30) == {"d": {"b": 2, "c": 3}}


def test_failed_graph_compensates_completed_steps_in_reverse_order(app: perdure.App) -> None:
    undone: list[str] = []
    g = app.graph("booking")

    def undo(name: str) -> Any:
        return lambda ctx, out: undone.append(f"{name}:{out}")

    @g.step(compensate=undo("flight"))
    def flight(ctx: perdure.StepContext, _: Any) -> str:
        return "F1"

    @g.step(depends_on=[flight], compensate=undo("hotel"))
    def hotel(ctx: perdure.StepContext, _: Any) -> str:
        return "H1"

    @g.step(depends_on=[hotel])
    def car(ctx: perdure.StepContext, _: Any) -> str:
        raise perdure.PermanentError("no cars left")

    handle = app.start("booking")
    with BackgroundWorker(app, **FAST):
        with pytest.raises(perdure.RunFailed) as info:
            handle.result(timeout=30)
    assert info.value.status == "compensated"
    assert undone == ["hotel:H1", "flight:F1"]
    run = handle.get()
    assert run.status == perdure.RunStatus.COMPENSATED
    assert run.error is not None and run.error["step"] == "car"
    names = [(s.name, s.kind, s.status.value) for s in app.steps(handle.id)]
    assert names == [
        ("flight", "step", "completed"),
        ("hotel", "step", "completed"),
        ("car", "step", "failed"),
        ("compensate:flight", "compensation", "completed"),
        ("compensate:hotel", "compensation", "completed"),
    ]
    events = [e.event for e in app.history(handle.id)]
    assert "run_compensating" in events and events[-1] == "run_compensated"


def test_a_failing_compensation_ends_compensation_failed_and_retry_resumes_it(
    app: perdure.App,
) -> None:
    broken = {"on": True}
    g = app.graph("fragile")

    def undo_a(ctx: perdure.StepContext, out: Any) -> None:
        if broken["on"]:
            raise perdure.PermanentError("cannot undo")

    @g.step(compensate=undo_a)
    def a(ctx: perdure.StepContext, _: Any) -> str:
        return "a"

    @g.step(depends_on=[a])
    def b(ctx: perdure.StepContext, _: Any) -> str:
        raise perdure.PermanentError("b broke")

    handle = app.start("fragile")
    with BackgroundWorker(app, **FAST):
        with pytest.raises(perdure.RunFailed) as info:
            handle.result(timeout=30)
        assert info.value.status == "compensation_failed"
        assert handle.get().error["compensations_failed"] == ["a"]
        broken["on"] = False
        app.retry(handle.id)
        with pytest.raises(perdure.RunFailed) as again:
            handle.result(timeout=30)
    assert again.value.status == "compensated"
    statuses = {s.name: s.status.value for s in app.steps(handle.id)}
    assert statuses == {"a": "completed", "b": "failed", "compensate:a": "completed"}


@pytest.mark.parametrize(
    ("build", "message"),
    [
        ("duplicate", "step 'a' is defined twice"),
        ("foreign", "not a step of this graph"),
        ("unknown", "depends on unknown step 'nope'"),
        ("cycle", "has a cycle through steps x, y"),
        ("self", "depends on itself"),
        ("join", "join must be 'all' or 'any'"),
        ("arity", "must take (ctx, input)"),
        ("empty", "has no steps"),
    ],
)
def test_invalid_graphs_are_refused_with_clear_errors(
    app: perdure.App, build: str, message: str
) -> None:
    g = app.graph(f"bad_{build}")

    def step(ctx: Any, x: Any) -> Any:
        return x

    def other(ctx: Any, x: Any) -> Any:
        return x

    with pytest.raises(perdure.WorkflowDefinitionError, match=re.escape(message)):
        if build == "duplicate":
            g.step("a")(step)
            g.step("a")(other)
        elif build == "foreign":
            g.step("a", depends_on=[other])(step)
        elif build == "unknown":
            g.step("a", depends_on=["nope"])(step)
            app.start(f"bad_{build}")
        elif build == "cycle":
            g.step("x", depends_on=["y"])(step)
            g.step("y", depends_on=["x"])(other)
            g.validate()
        elif build == "self":
            g.step("a", depends_on=["a"])(step)
        elif build == "join":
            g.step("a", join="some")(step)
        elif build == "arity":
            g.step("a")(lambda: None)
        else:
            app.worker()
    assert app.list_runs() == []


def _wide_graph(app: perdure.App, name: str, leaves: int, undone: list[str]) -> None:
    """root -> leaves (every 10th skipped by its condition, every 100th
    compensable) -> a join that fails for good."""
    g = app.graph(name)

    @g.step()
    async def root(ctx: perdure.StepContext, _: Any) -> int:
        return 0

    def undo(i: int) -> Any:
        return lambda ctx, out: undone.append(f"leaf{i:04d}:{out}")

    async def leaf(ctx: perdure.StepContext, value: int) -> int:
        return value + 1

    for i in range(leaves):
        g.step(
            f"leaf{i:04d}",
            depends_on=[root],
            when=(lambda _value, i=i: i % 10 != 0),
            compensate=undo(i) if i % 100 == 1 else None,
        )(leaf)

    @g.step(depends_on=[f"leaf{i:04d}" for i in range(leaves)], join="any")
    def join(ctx: perdure.StepContext, outputs: dict[str, int]) -> int:
        raise perdure.PermanentError(f"{len(outputs)} inputs")


def _run_wide(app: perdure.App, name: str, leaves: int, concurrency: int = 8) -> tuple[Any, ...]:
    undone: list[str] = []
    _wide_graph(app, name, leaves, undone)
    handle = app.start(name)
    with BackgroundWorker(app, **{**FAST, "concurrency": concurrency, "lease_seconds": 30}):
        with pytest.raises(perdure.RunFailed) as info:
            handle.result(timeout=120)
    steps = [(s.name, s.kind, s.status.value, s.output) for s in app.steps(handle.id)]
    events = sorted(
        (e.event, e.step_name or "")
        for e in app.history(handle.id)
        if e.event not in ("step_claimed", "run_claimed")
    )
    return info.value.status, info.value.error, undone, steps, events


def test_a_graph_run_in_batches_has_the_results_and_history_of_one_by_one(
    app: perdure.App, monkeypatch: pytest.MonkeyPatch
) -> None:
    from perdure.engine import parallel

    batched = _run_wide(app, "wide_batched", 200)
    monkeypatch.setattr(parallel, "GATHER_BATCH", 0)  # every step by the claim loops
    one_by_one = _run_wide(app, "wide_one_by_one", 200)
    assert batched[0] == "compensated"
    assert batched[2] == ["leaf0101:1", "leaf0001:1"]
    assert batched == one_by_one


def test_a_1000_leaf_graph_with_skips_a_failing_join_and_compensations(
    app: perdure.App,
) -> None:
    status, error, undone, steps, events = _run_wide(app, "wide", 1000, concurrency=64)
    assert status == "compensated"
    assert error is not None and "900 inputs" in str(error)
    assert undone == [f"leaf{i:04d}:1" for i in range(901, 0, -100)]
    by_status: dict[str, list[str]] = {}
    for name, kind, step_status, _ in steps:
        by_status.setdefault(f"{kind}:{step_status}", []).append(name)
    assert len(by_status["step:skipped"]) == 100
    assert len(by_status["step:completed"]) == 901  # the root and 900 leaves
    assert by_status["step:failed"] == ["join"]
    assert len(by_status["compensation:completed"]) == 10
    completed = [name for event, name in events if event == "step_completed"]
    assert len(completed) == len(set(completed)) == 911


def _beats_seen(app: perdure.App, seen: set[object]) -> int:
    """How many distinct heartbeat times of the workers were seen so far."""
    seen.update(w.heartbeat_at for w in app.workers())
    return len(seen)


def test_a_task_that_ran_the_steps_it_made_ready_is_not_reported_lost(app: perdure.App) -> None:
    release = threading.Event()
    held: list[int] = []
    g = app.graph("held_leaves")

    @g.step()
    def start(ctx: perdure.StepContext, _: Any) -> int:
        return 1

    def leaf(ctx: perdure.StepContext, value: int) -> int:
        held.append(value)
        release.wait(20)
        return value

    for i in range(2):
        g.step(f"leaf{i}", depends_on=[start])(leaf)

    handle = app.start("held_leaves", None)
    with BackgroundWorker(app, **FAST, heartbeat_seconds=0.05) as background:
        try:
            wait_until(lambda: len(held) == 2, 20, what="the leaves to run")
            # The task whose decision made the leaves ready (ended already)
            # waits for them here across several heartbeats.
            beats: set[object] = set()
            wait_until(
                lambda: _beats_seen(app, beats) >= 4,
                20,
                what="heartbeats while the leaves run",
            )
        finally:
            release.set()
        assert handle.result(timeout=30) == {"leaf0": 1, "leaf1": 1}
        assert background.count("lease_lost") == background.count("lease_taken") == 0


def test_a_graph_step_longer_than_its_lease_runs_once_in_its_schedulers_batch(
    app: perdure.App,
) -> None:
    """The worker runs the steps its decision made ready in a batch of its own; their
    leases are kept while they run, so a step outliving one lease is not run again."""
    runs: list[int] = []
    g = app.graph("long_leaf")

    @g.step()
    def root(ctx: perdure.StepContext, _: Any) -> int:
        return 1

    @g.step(depends_on=[root])
    def slow(ctx: perdure.StepContext, value: int) -> int:
        runs.append(value)
        time.sleep(3.5)  # the step's own work: three and a half leases
        return value

    handle = app.start("long_leaf", None)
    with BackgroundWorker(app, concurrency=8, poll_seconds=0.05, lease_seconds=1):
        assert handle.result(timeout=30) == {"slow": 1}
    assert runs == [1], "the step ran again after its lease lapsed"
