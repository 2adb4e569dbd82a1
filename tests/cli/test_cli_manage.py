"""``perdure runs cancel|retry`` by filter, ``runs restart`` and ``runs fork``."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from click.testing import CliRunner, Result

import perdure
from perdure.cli.main import cli
from perdure.testing import drain


@pytest.fixture
def invoke(pg_url: str, schema: str) -> Callable[..., Result]:
    """Run a ``perdure`` command on this test's schema; ``input`` answers its questions."""

    def run(*args: str, input: str | None = None) -> Result:
        return CliRunner().invoke(
            cli,
            ["--database-url", pg_url, "--schema", schema, *args],
            input=input,
            catch_exceptions=False,
        )

    return run


@pytest.fixture
def failed(app: perdure.App) -> list[perdure.RunHandle]:
    """Three failed runs of 'flaky' and one completed run of it."""

    def maybe(fail: bool) -> str:
        if fail:
            raise perdure.PermanentError("flaked")
        return "ok"

    @app.workflow("flaky")
    async def flaky(ctx: perdure.Context, fail: bool) -> str:
        await ctx.step("first", lambda: 1)
        return await ctx.step("maybe", maybe, fail)

    handles = [app.start("flaky", True) for _ in range(3)]
    app.start("flaky", False)
    drain(app)
    app.register()  # the CLI's bare App finds the workflow in the registry
    return handles


def _statuses(handles: list[perdure.RunHandle]) -> list[str]:
    return [h.status().value for h in handles]


def test_bulk_retry_dry_run_lists_the_runs_and_changes_nothing(
    invoke: Callable[..., Result], failed: list[perdure.RunHandle]
) -> None:
    result = invoke("runs", "retry", "--workflow", "flaky", "--since", "1h", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "3 run(s) would be retried:" in result.output
    assert all(h.id in result.output for h in failed)
    assert _statuses(failed) == ["failed"] * 3


def test_bulk_retry_asks_first_and_acts_on_the_runs_it_showed(
    invoke: Callable[..., Result], failed: list[perdure.RunHandle]
) -> None:
    declined = invoke("runs", "retry", "--status", "failed", input="n\n")
    assert declined.exit_code == 1 and "Retry these 3 run(s)?" in declined.output
    assert _statuses(failed) == ["failed"] * 3
    accepted = invoke("runs", "retry", "--status", "failed", "--batch-size", "2", input="y\n")
    assert accepted.exit_code == 0, accepted.output
    assert "3 run(s) queued again" in accepted.output
    assert _statuses(failed) == ["queued"] * 3


def test_bulk_cancel_with_yes_and_json(
    invoke: Callable[..., Result], app: perdure.App, failed: list[perdure.RunHandle]
) -> None:
    revived = invoke("runs", "retry", "--workflow", "flaky", "--yes", "--json")
    assert json.loads(revived.output)["count"] == 3
    result = invoke("runs", "cancel", "--workflow", "flaky", "--yes", "--json", "--reason", "x")
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.output)
    assert (outcome["operation"], outcome["dry_run"], outcome["count"]) == ("cancel", False, 3)
    assert {r["id"] for r in outcome["runs"]} == {h.id for h in failed}
    assert _statuses(failed) == ["cancelled"] * 3
    nothing = invoke("runs", "cancel", "--workflow", "flaky", "--yes")
    assert nothing.exit_code == 0 and "0 run(s) would be cancelled" in nothing.output
    failed_ones = invoke("runs", "cancel", "--status", "failed", "--dry-run")
    assert "0 run(s) would be cancelled" in failed_ones.output
    assert "cancel applies to queued, running, waiting, paused, compensating runs" in (
        failed_ones.output
    )


def test_a_run_and_a_filter_together_or_neither_is_a_usage_error(
    invoke: Callable[..., Result], failed: list[perdure.RunHandle]
) -> None:
    both = invoke("runs", "cancel", failed[0].id, "--workflow", "flaky")
    assert both.exit_code == 2 and "not both" in both.output
    neither = invoke("runs", "retry")
    assert neither.exit_code == 2 and "give a run (ID_OR_KEY), or a filter" in neither.output
    previewed = invoke("runs", "retry", failed[0].id, "--dry-run")
    assert previewed.exit_code == 2 and "takes no ID_OR_KEY" in previewed.output
    assert failed[0].status() == perdure.RunStatus.FAILED


def test_restart_and_fork_print_the_new_run(
    invoke: Callable[..., Result], app: perdure.App, failed: list[perdure.RunHandle]
) -> None:
    original = failed[0].id
    restarted = invoke("runs", "restart", original)
    assert restarted.exit_code == 0, restarted.output
    assert f"restarts run {original} from the beginning" in restarted.output
    forked = invoke("runs", "fork", original, "--from-step", "maybe")
    assert forked.exit_code == 0, forked.output
    assert f"forks run {original} at step 'maybe': 1 recorded step(s) reused" in forked.output
    lineage = {(r.restarted_from, r.forked_from) for r in app.list_runs(workflow="flaky")}
    assert {(original, None), (None, original)} <= lineage
    fork_id = forked.output.split()[1]
    shown = invoke("runs", "show", fork_id)
    assert f"forked from  {original} at 'maybe'" in shown.output

    unknown = invoke("runs", "fork", original, "--from-step", "nope")
    assert unknown.exit_code == 1
    assert unknown.output.startswith("Error: UnknownStep:") and "'first', 'maybe'" in unknown.output
    unclear = invoke("runs", "fork", original)
    assert unclear.exit_code == 2 and "exactly one of --from-step" in unclear.output

    # By position: position 1 is "maybe", so the same step is reused.
    by_position = invoke("runs", "fork", original, "--from-position", "1")
    assert by_position.exit_code == 0, by_position.output
    assert f"forks run {original} at step 'maybe': 1 recorded step(s) reused" in by_position.output
    positioned = app.get_run(by_position.output.split()[1])
    assert (positioned.forked_from, positioned.fork_step) == (original, "maybe")
