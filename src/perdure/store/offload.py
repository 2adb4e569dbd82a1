"""Payloads too big for a row: kept in an object store, the row keeping a reference.

After the codec (store/codec.py) has sealed a payload (compressed, encrypted),
a sealed text longer than ``above`` bytes is written to an object store and
the row keeps an envelope naming it::

    {"$perdure": {"v": 1, "ref": "s3://bucket/prefix/<name>",
                  "sha256": "<hex>", "size": 1048576}}

The object holds the sealed text itself, so with encryption on it is
ciphertext. Objects are written before the statement whose row references
them (``Builder`` hands them to the statement, the store uploads them first),
so a committed row never names a missing object. Reading fetches the object
on demand and checks its hash; a missing or altered object reads as an
``Undecodable`` marker, which fails the run that needs it alone.

Backends: a directory (``file:///path``) and any S3-compatible store
(``s3://bucket/prefix``, through boto3: ``pip install 'perdure[s3]'``), or
the user's own ``ObjectStore``. Configuration: ``PERDURE_OFFLOAD_URL``,
``PERDURE_OFFLOAD_ABOVE`` (bytes, default 256 KiB) and, for S3,
``PERDURE_S3_ENDPOINT_URL`` with the standard AWS variables.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable
from urllib.parse import unquote, urlparse

from perdure.errors import ConfigurationError, ObjectStoreError

__all__ = [
    "ABOVE_ENV",
    "DEFAULT_ABOVE",
    "ENDPOINT_ENV",
    "URL_ENV",
    "FileObjectStore",
    "ObjectMissing",
    "ObjectStore",
    "Offload",
    "Pending",
    "S3ObjectStore",
    "from_environment",
    "object_store",
]

#: The variable naming the object store (``file:///path`` or ``s3://bucket/prefix``).
URL_ENV = "PERDURE_OFFLOAD_URL"
#: The variable holding the size (bytes) above which a sealed payload is offloaded.
ABOVE_ENV = "PERDURE_OFFLOAD_ABOVE"
#: The S3 endpoint of an S3-compatible store (MinIO, R2, moto...); AWS without it.
ENDPOINT_ENV = "PERDURE_S3_ENDPOINT_URL"
#: Offload above this many bytes when a store is configured without a size.
DEFAULT_ABOVE = 256 * 1024


class ObjectMissing(LookupError):
    """The object a reference names is not in the store."""


@runtime_checkable
class ObjectStore(Protocol):
    """Where offloaded payloads go: a flat namespace of immutable objects.

    ``url`` is the store's base (``s3://bucket/prefix``); references are
    ``url + "/" + name``. Methods are blocking: perdure calls them in a
    thread from async code. ``get`` raises ``ObjectMissing`` for a name it
    does not hold; ``delete`` ignores names it does not hold.
    """

    url: str

    def put(self, name: str, data: bytes) -> None:
        """Store ``data`` under ``name`` (overwriting is allowed: names are unique)."""
        ...

    def get(self, name: str) -> bytes:
        """The bytes stored under ``name``; ObjectMissing when there are none."""
        ...

    def delete(self, names: Sequence[str]) -> None:
        """Delete the objects ``names`` (those missing are ignored)."""
        ...


class FileObjectStore:
    """Objects as files in one directory (``file:///path``): one machine, or a shared mount."""

    def __init__(self, root: str | Path) -> None:
        """A store writing under directory ``root`` (created when missing)."""
        self.root = Path(root)
        self.url = "file://" + str(self.root.resolve())

    def _path(self, name: str) -> Path:
        if not name or "/" in name or name.startswith("."):
            raise ObjectMissing(f"invalid object name {name!r}")
        return self.root / name

    def put(self, name: str, data: bytes) -> None:
        """Write ``data`` to a temporary file, then rename it into place (never half an object).

        Durable on return, as a committed row is: the file's bytes are flushed to
        the disk before the rename, and the directory's entry after it, so the row
        that will reference the object never outlives it in a power loss.
        """
        path = self._path(name)
        partial = self.root / f".{name}.{uuid.uuid4().hex}.partial"
        try:
            fd = os.open(partial, _CREATE, 0o644)
        except FileNotFoundError:
            self.root.mkdir(parents=True, exist_ok=True)
            fd = os.open(partial, _CREATE, 0o644)
        try:
            _write_all(fd, data)
            os.fsync(fd)
        except BaseException:
            os.close(fd)
            partial.unlink(missing_ok=True)
            raise
        os.close(fd)
        os.replace(partial, path)
        _fsync_directory(self.root)

    def get(self, name: str) -> bytes:
        """The file's bytes; ObjectMissing when it does not exist."""
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError:
            raise ObjectMissing(f"{self.url}/{name} does not exist") from None

    def delete(self, names: Sequence[str]) -> None:
        """Remove the files ``names``."""
        for name in names:
            try:
                self._path(name).unlink(missing_ok=True)
            except ObjectMissing:
                continue


#: How a new object's temporary file is opened: created, never an existing one.
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def _write_all(fd: int, data: bytes) -> None:
    """Write all of ``data`` to ``fd`` (one system call unless the kernel takes less)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _fsync_directory(root: Path) -> None:
    """Flush ``root``'s entries (a rename into it) to the disk, where the system allows it."""
    try:
        fd = os.open(root, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:  # pragma: no cover - a system that cannot open a directory (Windows)
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - a file system that does not sync directories
        pass
    finally:
        os.close(fd)


class S3ObjectStore:
    """Objects in an S3 bucket under a prefix, through boto3 (any S3-compatible endpoint)."""

    def __init__(
        self, bucket: str, prefix: str = "", *, endpoint_url: str | None = None, client: Any = None
    ) -> None:
        """A store in ``bucket`` under ``prefix``; credentials from the AWS environment."""
        if client is None:
            try:
                import boto3  # type: ignore[import-untyped]
            except ImportError:  # pragma: no cover - the dev extra installs it
                raise ConfigurationError(
                    "an s3:// object store needs boto3: pip install 'perdure[s3]'"
                ) from None
            client = boto3.client("s3", endpoint_url=endpoint_url)
        self.client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}" + (f"/{self.prefix}" if self.prefix else "")

    def _key(self, name: str) -> str:
        return f"{self.prefix}/{name}" if self.prefix else name

    def put(self, name: str, data: bytes) -> None:
        """Upload ``data`` as one object."""
        self.client.put_object(Bucket=self.bucket, Key=self._key(name), Body=data)

    def get(self, name: str) -> bytes:
        """Download one object; ObjectMissing when there is none."""
        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=self._key(name))
        except self.client.exceptions.NoSuchKey:
            raise ObjectMissing(f"{self.url}/{name} does not exist") from None
        body: bytes = answer["Body"].read()
        return body

    def delete(self, names: Sequence[str]) -> None:
        """Delete objects, a thousand per request."""
        names = list(names)
        for start in range(0, len(names), 1000):
            chunk = [{"Key": self._key(n)} for n in names[start : start + 1000]]
            self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": chunk, "Quiet": True})


def object_store(url: str, *, endpoint_url: str | None = None) -> ObjectStore:
    """The store of ``url``: ``file:///path`` or ``s3://bucket/prefix``."""
    parsed = urlparse(url)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ConfigurationError(f"a file:// object store must be local, not {url!r}")
        return FileObjectStore(unquote(parsed.path))
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ConfigurationError(f"an s3:// object store needs a bucket: {url!r}")
        return S3ObjectStore(parsed.netloc, unquote(parsed.path), endpoint_url=endpoint_url)
    raise ConfigurationError(f"{URL_ENV} must be file:///path or s3://bucket/prefix, not {url!r}")


@dataclass(slots=True)
class Pending:
    """An object to upload before the statement whose row references it."""

    name: str
    data: bytes


class Offload:
    """Sealed payloads above ``above`` bytes go to ``store``; rows keep a reference."""

    def __init__(self, store: ObjectStore, above: int = DEFAULT_ABOVE) -> None:
        """Offload to ``store`` every sealed payload longer than ``above`` bytes."""
        if not isinstance(store, ObjectStore) or not isinstance(getattr(store, "url", None), str):
            raise ConfigurationError(
                f"an object store needs a url and put/get/delete methods, not {store!r}"
            )
        if isinstance(above, bool) or not isinstance(above, int) or above < 0:
            raise ConfigurationError(
                f"offload_above must be a number of bytes (0 or more), not {above!r}"
            )
        self.store = store
        self.above = above
        self.base = store.url.rstrip("/") + "/"

    def __repr__(self) -> str:
        return f"Offload({self.store.url!r}, above={self.above})"

    def header(self, data: bytes) -> tuple[dict[str, Any], Pending]:
        """The envelope header referencing ``data``, and the object to upload."""
        name = uuid.uuid4().hex
        header = {
            "v": 1,
            "ref": self.base + name,
            "sha256": hashlib.sha256(data).hexdigest(),
            "size": len(data),
        }
        return header, Pending(name, data)

    def name_of(self, ref: str) -> str | None:
        """The object name of reference ``ref`` in this store, or None if elsewhere."""
        if not ref.startswith(self.base):
            return None
        name = ref[len(self.base) :]
        return name if name and "/" not in name else None

    def fetch(self, header: Mapping[str, Any]) -> bytes:
        """The bytes ``header`` references, their hash checked; ObjectStoreError if not."""
        ref, digest = header.get("ref"), header.get("sha256")
        if not isinstance(ref, str) or not isinstance(digest, str):
            raise ObjectStoreError("a malformed offloaded-payload reference")
        name = self.name_of(ref)
        if name is None:
            raise ObjectStoreError(f"{ref} is not in the configured object store {self.store.url}")
        try:
            data = self.store.get(name)
        except ObjectMissing:
            raise ObjectStoreError(f"offloaded payload {ref} is missing") from None
        except Exception as exc:
            raise ObjectStoreError(f"offloaded payload {ref} cannot be read: {exc}"[:300]) from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise ObjectStoreError(f"offloaded payload {ref} is corrupt (sha256 mismatch)")
        return data

    def upload(self, pending: list[Pending]) -> None:
        """Upload ``pending`` (emptied as it goes, so the bytes are freed)."""
        while pending:
            item = pending[-1]
            try:
                self.store.put(item.name, item.data)
            except Exception as exc:
                raise ObjectStoreError(
                    f"cannot write an offloaded payload to {self.store.url}: {exc}"[:300]
                ) from exc
            pending.pop()

    def delete_refs(self, refs: Sequence[str]) -> int:
        """Delete the objects of ``refs`` held in this store; how many were named."""
        names = [n for n in (self.name_of(r) for r in refs) if n is not None]
        if names:
            self.store.delete(names)
        return len(names)


def from_environment(
    environ: Mapping[str, str] | None = None,
    *,
    store: ObjectStore | str | None = None,
    above: int | None = None,
) -> Offload | None:
    """The offload of the arguments, else of ``PERDURE_OFFLOAD_URL``/``_ABOVE``; None: off."""
    env = os.environ if environ is None else environ
    if above is None:
        text = env.get(ABOVE_ENV, "").strip()
        if text:
            try:
                above = int(text)
            except ValueError:
                raise ConfigurationError(
                    f"{ABOVE_ENV} must be a number of bytes, not {text!r}"
                ) from None
    if store is None:
        store = env.get(URL_ENV, "").strip() or None
    if store is None:
        return None
    if isinstance(store, str):
        endpoint = env.get(ENDPOINT_ENV, "").strip() or None
        store = object_store(store, endpoint_url=endpoint)
    return Offload(store, DEFAULT_ABOVE if above is None else above)
