"""Large payloads: a map of 1,000 items each returning 1 MiB, offloaded to an object store.

Usage: python bench/offload.py [--items 1000] [--mib 1] [--store file|s3|none]
       [--database-url URL]

One ``perdure worker offload:app`` process serves, with ``PERDURE_OFFLOAD_URL``
set to a fresh directory (``file://``) or a moto S3 server started here
(``s3``), or without it (``none``: payloads in their rows, for comparison).
Prints the map's duration (created -> completed, from the database), the
worker's peak resident memory (VmHWM), and the time of writing the same
bytes to the same object store alone (durable as the worker's writes are:
the same ``put``), with their ratio: from a process of
its own (as the worker is; moto's server runs in this one), one ``put``
after another, then from as many threads as the worker uploads from
(asyncio's default pool). The machine may be shared: the numbers move with
its load.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

import perdure

BENCH_DIR = Path(__file__).resolve().parent
MIB = 1024 * 1024

#: The App the worker serves (``perdure worker offload:app``); the store comes from the environment.
app = perdure.App(max_payload_bytes=16 * MIB)


async def blob(index: int) -> str:
    """``PERDURE_BENCH_MIB`` MiB of text (the index, repeated)."""
    size = int(os.environ.get("PERDURE_BENCH_MIB", "1")) * MIB
    unit = f"{index:08d}"
    return unit * (size // len(unit))


@app.workflow("offload_map")
async def offload_map(ctx: perdure.Context, items: int) -> int:
    """Map ``items`` blobs; the total number of characters they returned."""
    results = await ctx.map("blob", blob, range(items))
    return sum(len(r) for r in results)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _store_env(kind: str, folder: Path) -> tuple[dict[str, str], Any]:
    """The environment of an empty object store of ``kind``, and the moto server (or None)."""
    if kind == "none":
        return {}, None
    if kind == "file":
        return {"PERDURE_OFFLOAD_URL": f"file://{folder / 'objects'}"}, None
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    env = {
        "AWS_ACCESS_KEY_ID": "bench",
        "AWS_SECRET_ACCESS_KEY": "bench",
        "AWS_DEFAULT_REGION": "us-east-1",
        "PERDURE_S3_ENDPOINT_URL": f"http://127.0.0.1:{port}",
        "PERDURE_OFFLOAD_URL": "s3://bench/payloads",
    }
    import boto3

    boto3.client(
        "s3",
        endpoint_url=env["PERDURE_S3_ENDPOINT_URL"],
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        region_name="us-east-1",
    ).create_bucket(Bucket="bench")
    return env, server


def _store_alone(env: dict[str, str], items: int, mib: int, threads: int) -> float:
    """Seconds to put ``items`` objects of ``mib`` MiB into the store of ``env`` from a
    process of its own (as the worker is: not the one serving moto), ``threads`` at once."""
    command = [sys.executable, str(Path(__file__).resolve()), "--alone", str(items)]
    command += ["--mib", str(mib), "--threads", str(threads)]
    answer = subprocess.run(
        command, env=dict(os.environ, **env), check=True, capture_output=True, text=True
    )
    return float(answer.stdout.split()[-1])


def _put_alone(items: int, mib: int, threads: int) -> float:
    """In this process: ``items`` objects of ``mib`` MiB, each the JSON text a step
    returning ``blob(index)`` stores, put into the store of the environment."""
    from concurrent.futures import ThreadPoolExecutor

    from perdure.store.offload import from_environment

    offload = from_environment()
    assert offload is not None
    store = offload.store

    def put(index: int) -> None:
        unit = f"{index:08d}"
        data = ('"' + unit * (mib * MIB // len(unit)) + '"').encode()
        store.put(f"alone-{index}", data)

    began = time.perf_counter()
    if threads == 1:
        for index in range(items):
            put(index)
    else:
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(put, range(items)))
    return time.perf_counter() - began


def measure(url: str, items: int, mib: int, kind: str) -> dict[str, Any]:
    """One map of ``items`` blobs of ``mib`` MiB through a worker, and the store alone."""
    schema = f"bench_{uuid.uuid4().hex[:8]}"
    folder = Path(tempfile.mkdtemp(prefix="perdure-bench-offload-"))
    store_env, server = _store_env(kind, folder)
    env = dict(
        os.environ,
        **store_env,
        PERDURE_DATABASE_URL=url,
        PERDURE_SCHEMA=schema,
        PERDURE_BENCH_MIB=str(mib),
        PYTHONPATH=os.pathsep.join([str(BENCH_DIR), os.environ.get("PYTHONPATH", "")]),
    )
    try:
        return _measure(url, schema, env, store_env, items, mib)
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(folder, ignore_errors=True)


def _measure(
    url: str, schema: str, env: dict[str, str], store_env: dict[str, str], items: int, mib: int
) -> dict[str, Any]:
    """The map through a worker on ``schema``, then the store alone."""
    command = [sys.executable, "-m", "perdure", "worker", "offload:app", "--log-level", "warning"]
    client = perdure.App(url, schema=schema, max_payload_bytes=16 * MIB)
    client.ensure_schema()
    worker = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120
        while True:  # until the worker has registered the workflow
            try:
                handle = client.start("offload_map", items)
                break
            except perdure.UnknownWorkflow:
                if time.monotonic() > deadline or worker.poll() is not None:
                    raise
                time.sleep(0.2)
        while True:
            try:
                total = handle.result(timeout=5)
                break
            except perdure.ResultTimeout:
                if worker.poll() is not None:
                    raise RuntimeError(f"the worker exited with code {worker.returncode}") from None
        from harness import rss_peak_mib

        rss = rss_peak_mib(worker.pid)
        run = handle.get()
        assert run.completed_at is not None
        mapped = (run.completed_at - run.created_at).total_seconds()
        with psycopg.connect(url) as conn:  # when the last step's output was written
            last = conn.execute(
                f"SELECT max(completed_at) FROM {schema}.steps WHERE run_id = %s AND kind = 'step'",
                (run.id,),
            ).fetchone()
        steps_done = (last[0] - run.created_at).total_seconds() if last and last[0] else mapped
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    expected = items * (mib * MIB // 8) * 8
    if total != expected:
        raise RuntimeError(f"the map returned {total} characters, not {expected}")
    alone = _store_alone(store_env, items, mib, 1) if store_env else None
    # The worker writes objects from asyncio's default thread pool.
    threads = min(32, (os.cpu_count() or 1) + 4)
    pooled = _store_alone(store_env, items, mib, threads) if store_env else None
    client.close()
    return {
        "map_s": mapped,
        "steps_s": steps_done,
        "alone_s": alone,
        "pooled_s": pooled,
        "rss_mib": rss,
    }


def main() -> None:
    """Print the numbers."""
    sys.path.insert(0, str(BENCH_DIR))
    from harness import standalone

    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--mib", type=int, default=1)
    parser.add_argument("--store", choices=["file", "s3", "none"], default="file")
    parser.add_argument("--alone", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    if "--alone" in sys.argv:  # the store alone, in a process of its own (_store_alone)
        args = parser.parse_args()
        print(f"{_put_alone(args.alone, args.mib, args.threads):.3f}", flush=True)
        return
    with standalone(parser) as (args, server, _probe):
        m = measure(server.url, args.items, args.mib, args.store)
        alone, pooled = m["alone_s"], m["pooled_s"]
        versus = (
            "payloads in their rows (no offload)"
            if alone is None
            else f"the same bytes to the store alone: {alone:.1f} s one after another "
            f"(map / alone = {m['map_s'] / alone:.2f}x, last step written / alone = "
            f"{m['steps_s'] / alone:.2f}x), {pooled:.1f} s from "
            f"{min(32, (os.cpu_count() or 1) + 4)} threads (map / alone = "
            f"{m['map_s'] / pooled:.2f}x)"
        )
        print(
            f"map of {args.items} x {args.mib} MiB via {args.store}: {m['map_s']:.1f} s "
            f"(the last step written at {m['steps_s']:.1f} s); "
            f"{versus}; worker peak RSS {m['rss_mib']:.0f} MiB",
            flush=True,
        )


if __name__ == "__main__":
    main()
