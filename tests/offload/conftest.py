"""Fixtures of the offload tests: a real S3 endpoint (moto's server mode) and stores."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """The URL of an S3 server this session started (moto, on a free local port)."""
    from moto.server import ThreadedMotoServer

    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


@pytest.fixture
def s3_env(s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """The AWS variables and PERDURE_S3_ENDPOINT_URL set for the test server; a new bucket."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("PERDURE_S3_ENDPOINT_URL", s3_endpoint)
    bucket = f"b-{uuid.uuid4().hex[:12]}"
    client().create_bucket(Bucket=bucket)
    return bucket


def client() -> Any:
    """A boto3 client of the test server (from the environment s3_env set)."""
    import os

    import boto3

    return boto3.client("s3", endpoint_url=os.environ["PERDURE_S3_ENDPOINT_URL"])


@pytest.fixture(params=["file", "s3"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty object store of each backend."""
    if request.param == "file":
        return f"file://{tmp_path / 'objects'}"
    bucket = request.getfixturevalue("s3_env")
    return f"s3://{bucket}/payloads"
