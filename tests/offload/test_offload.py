"""Payloads too big for a row, in a real object store: a directory and an S3 server.

Over the configured size a payload goes to the object store and its row
keeps only a reference and a hash; reading fetches it. With encryption on the
object holds ciphertext. Prune deletes the objects of the runs it deletes.
A missing or altered object fails the run that needs it alone, with a clear
error, and reads as that error in listings.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import perdure
from perdure.store.encryption import AesGcm, generate_key_line
from perdure.store.offload import FileObjectStore, ObjectStore, S3ObjectStore
from perdure.testing import drain

DB = psycopg.Connection[tuple[Any, ...]]
MARKER = "zq-offload-marker-51c2"
BIG = 300 * 1024
ABOVE = 64 * 1024


def _big(tag: str) -> str:
    return (MARKER + tag) * (BIG // (len(MARKER) + len(tag)))


def _register(app: perdure.App) -> None:
    async def grow(text: str) -> str:
        return text + "!" * 10

    @app.workflow("large")
    async def large(ctx: perdure.Context, text: str) -> dict[str, Any]:
        step = await ctx.step("grow", grow, text)
        return {"length": len(step), "echo": step}

    app.register()


def names(store: ObjectStore) -> list[str]:
    """The names of the objects in ``store``."""
    if isinstance(store, FileObjectStore):
        if not store.root.exists():
            return []
        return sorted(p.name for p in store.root.iterdir() if not p.name.startswith("."))
    assert isinstance(store, S3ObjectStore)
    listed = store.client.list_objects_v2(Bucket=store.bucket, Prefix=store.prefix + "/")
    return sorted(o["Key"].rsplit("/", 1)[-1] for o in listed.get("Contents", []))


def _row_sizes(db: DB, run_id: str) -> list[int]:
    """The text length of every payload column of the run and its steps."""
    found = db.execute(
        "SELECT length(input::text), length(coalesce(output::text, '')) FROM runs WHERE id = %s",
        (run_id,),
    ).fetchone()
    assert found is not None
    steps = db.execute(
        "SELECT length(coalesce(output::text, '')) FROM steps WHERE run_id = %s", (run_id,)
    ).fetchall()
    return [*found, *(s[0] for s in steps)]


def test_a_large_input_step_output_and_output_round_trip_with_only_a_reference_in_the_row(
    make_app: Callable[..., perdure.App], db: DB, store_url: str
) -> None:
    app = make_app(offload=store_url, offload_above=ABOVE, max_payload_bytes=4 * 1024 * 1024)
    _register(app)
    text = _big("a")
    run = app.start("large", text)
    drain(app)

    done = app.get_run(run.id)
    assert done.status == "completed", done.error
    assert done.input == text
    assert done.output == {"length": len(text) + 10, "echo": text + "!" * 10}
    assert app.steps(run.id)[0].output == text + "!" * 10
    sizes = _row_sizes(db, run.id)
    assert len(sizes) == 3 and max(sizes) < 400, sizes
    stored = db.execute("SELECT input FROM runs WHERE id = %s", (run.id,)).fetchone()
    assert stored is not None
    header = stored[0]["$perdure"]
    assert header["ref"].startswith(store_url.rstrip("/") if store_url.startswith("s3") else "file")
    assert len(header["sha256"]) == 64 and header["size"] > BIG - 100
    store = app.payloads.offload.store  # type: ignore[union-attr]
    assert len(names(store)) == 3


def test_small_payloads_stay_in_the_row(
    make_app: Callable[..., perdure.App], db: DB, tmp_path: Any
) -> None:
    app = make_app(offload=f"file://{tmp_path}", offload_above=ABOVE)
    _register(app)
    run = app.start("large", "small")
    drain(app)
    assert app.get_run(run.id).output == {"length": 15, "echo": "small" + "!" * 10}
    stored = db.execute("SELECT output FROM runs WHERE id = %s", (run.id,)).fetchone()
    assert stored is not None and "$perdure" not in stored[0]
    assert list(tmp_path.iterdir()) == []


def test_with_encryption_on_the_object_holds_ciphertext(
    make_app: Callable[..., perdure.App], store_url: str
) -> None:
    app = make_app(
        offload=store_url,
        offload_above=ABOVE,
        codec=AesGcm.from_text(generate_key_line("k1")),
        max_payload_bytes=4 * 1024 * 1024,
    )
    _register(app)
    text = _big("e")
    run = app.start("large", text)
    drain(app)
    assert app.get_run(run.id).output["echo"] == text + "!" * 10  # type: ignore[index]
    store = app.payloads.offload.store  # type: ignore[union-attr]
    found = names(store)
    assert len(found) == 3
    for name in found:
        data = store.get(name)
        assert MARKER.encode() not in data
        assert json.loads(data)["$perdure"]["codec"] == "aes256gcm"


def test_without_encryption_the_object_holds_the_payload(
    make_app: Callable[..., perdure.App], tmp_path: Any
) -> None:
    """The counterpart of the ciphertext test: the marker is found when nothing encrypts."""
    app = make_app(offload=f"file://{tmp_path}", offload_above=ABOVE, max_payload_bytes=4 << 20)
    _register(app)
    app.start("large", _big("p"))
    drain(app)
    assert all(MARKER.encode() in p.read_bytes() for p in tmp_path.iterdir())


def test_prune_deletes_the_objects_of_the_runs_it_deletes(
    make_app: Callable[..., perdure.App], store_url: str
) -> None:
    app = make_app(offload=store_url, offload_above=ABOVE, max_payload_bytes=4 * 1024 * 1024)
    _register(app)
    old = app.start("large", _big("o"))
    drain(app)
    store = app.payloads.offload.store  # type: ignore[union-attr]
    assert len(names(store)) == 3
    kept = app.start("large", "x" * (2 * ABOVE))
    assert len(names(store)) == 4  # the unfinished run's input

    result = app.prune(datetime.now(UTC) + timedelta(hours=1))
    assert result.runs == 1
    with pytest.raises(perdure.RunNotFound):
        app.get_run(old.id)
    left = names(store)
    assert len(left) == 1
    assert app.get_run(kept.id).input == "x" * (2 * ABOVE)


def test_prune_with_archive_keeps_the_objects(
    make_app: Callable[..., perdure.App], tmp_path: Any
) -> None:
    app = make_app(offload=f"file://{tmp_path}", offload_above=ABOVE, max_payload_bytes=4 << 20)
    _register(app)
    run = app.start("large", _big("k"))
    drain(app)
    app.prune(datetime.now(UTC) + timedelta(hours=1), archive=True)
    assert len(list(tmp_path.iterdir())) == 3
    assert app.get_run(run.id).input == _big("k")


def _object_of_input(db: DB, run_id: str) -> str:
    found = db.execute("SELECT input FROM runs WHERE id = %s", (run_id,)).fetchone()
    assert found is not None
    ref: str = found[0]["$perdure"]["ref"]
    return ref.rsplit("/", 1)[-1]


@pytest.mark.parametrize("harm", ["deleted", "corrupted"])
def test_a_missing_or_altered_object_fails_its_run_alone_with_a_clear_error(
    make_app: Callable[..., perdure.App], db: DB, store_url: str, harm: str
) -> None:
    app = make_app(offload=store_url, offload_above=ABOVE, max_payload_bytes=4 * 1024 * 1024)
    _register(app)
    bad = app.start("large", _big("b"))
    good = app.start("large", _big("g"))
    store = app.payloads.offload.store  # type: ignore[union-attr]
    name = _object_of_input(db, bad.id)
    if harm == "deleted":
        store.delete([name])
    else:
        data = bytearray(store.get(name))
        data[len(data) // 2] ^= 1
        store.put(name, bytes(data))
    expected = "is missing" if harm == "deleted" else "sha256 mismatch"

    # Listings show the reason instead of failing.
    shown = app.get_run(bad.id)
    assert expected in str(shown.input)

    drain(app)
    failed = app.get_run(bad.id)
    assert failed.status == "failed"
    assert failed.error is not None
    assert failed.error["type"] == "perdure.errors.UndecodablePayload"
    assert expected in failed.error["message"] and "the input" in failed.error["message"]
    assert app.get_run(good.id).status == "completed"


def test_a_reference_read_without_an_object_store_configured_is_a_clear_marker(
    make_app: Callable[..., perdure.App], tmp_path: Any
) -> None:
    writer = make_app(offload=f"file://{tmp_path}", offload_above=ABOVE, max_payload_bytes=4 << 20)
    _register(writer)
    run = writer.start("large", _big("n"))
    reader = make_app()
    assert "no object store is configured" in str(reader.get_run(run.id).input)


def test_the_store_is_configured_from_the_environment(
    make_app: Callable[..., perdure.App], s3_env: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PERDURE_OFFLOAD_URL", f"s3://{s3_env}/env-prefix")
    monkeypatch.setenv("PERDURE_OFFLOAD_ABOVE", str(ABOVE))
    app = make_app(max_payload_bytes=4 * 1024 * 1024)
    offload = app.payloads.offload
    assert offload is not None and offload.above == ABOVE
    assert isinstance(offload.store, S3ObjectStore) and offload.store.prefix == "env-prefix"
    _register(app)
    run = app.start("large", _big("v"))
    assert app.get_run(run.id).input == _big("v")
    assert len(names(offload.store)) == 1


def test_bad_configuration_is_refused(tmp_path: Any) -> None:
    with pytest.raises(perdure.ConfigurationError, match="file:///path or s3://"):
        perdure.App("postgresql://x/y", offload="ftp://nowhere")
    with pytest.raises(perdure.ConfigurationError, match="offload_above"):
        perdure.App("postgresql://x/y", offload=f"file://{tmp_path}", offload_above=-1)
    with pytest.raises(perdure.ConfigurationError, match="put/get/delete"):
        perdure.App("postgresql://x/y", offload=object())  # type: ignore[arg-type]
    assert isinstance(
        perdure.App("postgresql://x/y", offload=FileObjectStore(tmp_path)).payloads.offload.store,  # type: ignore[union-attr]
        FileObjectStore,
    )


def test_the_dashboard_and_api_fetch_a_large_output_on_demand(
    make_app: Callable[..., perdure.App], store_url: str
) -> None:
    from starlette.testclient import TestClient

    from perdure.dashboard import DashboardConfig, create_app

    app = make_app(offload=store_url, offload_above=ABOVE, max_payload_bytes=4 * 1024 * 1024)
    _register(app)
    text = _big("d")
    run = app.start("large", text)
    drain(app)
    web = create_app(app, DashboardConfig())
    with TestClient(web, base_url="http://127.0.0.1") as client:
        answer = client.get(f"/api/v1/runs/{run.id}")
        assert answer.status_code == 200, answer.text[:500]
        assert answer.json()["output"]["echo"] == text + "!" * 10
        page = client.get(f"/runs/{run.id}", headers={"accept": "text/html"})
        assert page.status_code == 200
        assert MARKER + "d" in page.text

        # With its object gone, the page and the API show why, not an error.
        store = app.payloads.offload.store  # type: ignore[union-attr]
        store.delete(names(store))
        answer = client.get(f"/api/v1/runs/{run.id}")
        assert answer.status_code == 200, answer.text[:500]
        assert "is missing" in str(answer.json()["output"])
        page = client.get(f"/runs/{run.id}", headers={"accept": "text/html"})
        assert page.status_code == 200 and "is missing" in page.text


class _Refusing:
    """A store whose writes fail (a full disk, a revoked credential)."""

    url = "memory://refusing"

    def put(self, name: str, data: bytes) -> None:
        raise OSError("no space left on device")

    def get(self, name: str) -> bytes:
        raise AssertionError("nothing was written")

    def delete(self, names: Any) -> None:
        """Nothing to delete."""


def test_a_failed_upload_writes_no_row(
    make_app: Callable[..., perdure.App], db: DB, tmp_path: Any
) -> None:
    writer = make_app(offload=f"file://{tmp_path}", offload_above=ABOVE, max_payload_bytes=4 << 20)
    _register(writer)
    app = make_app(offload=_Refusing(), offload_above=ABOVE, max_payload_bytes=4 << 20)
    with pytest.raises(perdure.ObjectStoreError, match="no space left on device"):
        app.start("large", _big("f"))
    assert db.execute("SELECT count(*) FROM runs").fetchone() == (0,)
    small = app.start("large", "fits in a row")
    assert app.get_run(small.id).input == "fits in a row"


def test_a_long_step_output_is_checked_and_escaped_as_any_other(
    make_app: Callable[..., perdure.App], tmp_path: Any
) -> None:
    """A step returning a long text is encoded off the event loop: still refused when
    jsonb cannot hold it, still escaped when it needs to be."""
    app = make_app(
        offload=f"file://{tmp_path}", offload_above=ABOVE, max_payload_bytes=4 * 1024 * 1024
    )

    async def text(kind: str) -> Any:
        body = "x" * BIG
        if kind == "nul":
            return body + "\x00"
        if kind == "escaped":
            return 'a "quoted"\n\\ line\t' + body
        return {"text": body, "n": 1.5e20}

    @app.workflow("long_text")
    async def long_text(ctx: perdure.Context, kind: str) -> Any:
        return await ctx.step("text", text, kind)

    app.register()
    nul = app.start("long_text", "nul")
    escaped = app.start("long_text", "escaped")
    mixed = app.start("long_text", "mixed")
    drain(app)

    failed = app.get_run(nul.id)
    assert failed.status == "failed" and failed.error is not None
    assert "NUL character" in failed.error["message"]
    assert app.get_run(escaped.id).output == 'a "quoted"\n\\ line\t' + "x" * BIG
    assert app.get_run(mixed.id).output == {"text": "x" * BIG, "n": 150000000000000000000.0}
    assert len(names(app.payloads.offload.store)) == 4  # type: ignore[union-attr]
