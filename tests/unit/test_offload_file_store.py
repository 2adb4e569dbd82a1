"""The directory object store: an object is on the disk before ``put`` returns, never half."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from perdure.store import offload
from perdure.store.offload import FileObjectStore


def test_put_flushes_the_object_then_its_directory_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileObjectStore(tmp_path / "objects")
    synced: list[tuple[str, bool]] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        target = os.readlink(f"/proc/self/fd/{fd}")
        synced.append((target, (tmp_path / "objects" / "a1").exists()))
        real_fsync(fd)

    monkeypatch.setattr(offload.os, "fsync", fsync)
    store.put("a1", b"payload bytes")
    assert store.get("a1") == b"payload bytes"
    # The temporary file is flushed before it is renamed into place (the name
    # does not exist yet), then the directory holding the new name.
    assert len(synced) == 2
    (first, named_before), (second, named_after) = synced
    assert first.endswith(".partial") and not named_before
    assert second == str((tmp_path / "objects").resolve()) and named_after
    assert [p.name for p in (tmp_path / "objects").iterdir()] == ["a1"]


def test_a_failed_write_leaves_neither_the_object_nor_a_partial_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = FileObjectStore(tmp_path)

    def full(fd: int, data: object) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(offload.os, "write", full)
    with pytest.raises(OSError, match="No space left"):
        store.put("b2", b"x" * 4096)
    assert list(tmp_path.iterdir()) == []


def test_put_writes_all_of_a_large_object_and_creates_its_directory(tmp_path: Path) -> None:
    store = FileObjectStore(tmp_path / "made" / "here")
    data = bytes(range(256)) * (5 * 1024 * 1024 // 256)
    store.put("c3", data)
    assert store.get("c3") == data
    store.put("c3", b"replaced")  # names are unique; overwriting is allowed
    assert store.get("c3") == b"replaced"
