"""Large payloads: a map of 1,000 items each returning 1 MiB, offloaded to an object store.

Usage: python bench/offload.py [--items 1000] [--mib 1] [--store file|s3|none]
       [--database-url URL]

One ``perdure worker offload:app`` process serves, with ``PERDURE_OFFLOAD_URL``
set to a fresh directory (``file://``) or a moto S3 server started here
(``s3``), or without it (``none``: payloads in their rows, for comparison).
Prints the map's duration (created -> completed, from the database), the
worker's peak resident memory (VmHWM), and the time of writing the same
bytes to the same object store alone (one ``put`` per item, in one thread),
with their ratio. The machine may be shared: the numbers move with its load.
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


def _rss_peak_mib(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


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


def _store_alone(env: dict[str, str], items: int, mib: int) -> float:
    """Seconds to put ``items`` objects of ``mib`` MiB into the store of ``env``, one by one."""
    from perdure.store.offload import from_environment

    os.environ.update(env)  # boto3 reads its credentials from the environment
    offload = from_environment(env)
    assert offload is not None
    began = time.perf_counter()
    for index in range(items):
        unit = f"{index:08d}"
        data = ('"' + unit * (mib * MIB // len(unit)) + '"').encode()
        offload.store.put(f"alone-{index}", data)
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
        rss = _rss_peak_mib(worker.pid)
        run = handle.get()
        assert run.completed_at is not None
        mapped = (run.completed_at - run.created_at).total_seconds()
    finally:
        worker.terminate()
        worker.wait(timeout=60)
    expected = items * (mib * MIB // 8) * 8
    if total != expected:
        raise RuntimeError(f"the map returned {total} characters, not {expected}")
    alone = _store_alone(store_env, items, mib) if store_env else None
    client.close()
    return {"map_s": mapped, "alone_s": alone, "rss_mib": rss}


def main() -> None:
    """Print the numbers."""
    sys.path.insert(0, str(BENCH_DIR))
    from harness import standalone

    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--mib", type=int, default=1)
    parser.add_argument("--store", choices=["file", "s3", "none"], default="file")
    with standalone(parser) as (args, server, _probe):
        m = measure(server.url, args.items, args.mib, args.store)
        alone = m["alone_s"]
        versus = (
            "payloads in their rows (no offload)"
            if alone is None
            else f"the same bytes to the store alone: {alone:.1f} s "
            f"(map / alone = {m['map_s'] / alone:.1f}x)"
        )
        print(
            f"map of {args.items} x {args.mib} MiB via {args.store}: {m['map_s']:.1f} s; "
            f"{versus}; worker peak RSS {m['rss_mib']:.0f} MiB",
            flush=True,
        )


if __name__ == "__main__":
    main()
