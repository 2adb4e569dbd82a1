"""The offload step of the codec pipeline, without a database: thresholds, references, hashes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perdure.errors import ConfigurationError
from perdure.store.codec import Payloads
from perdure.store.loaders import Undecodable
from perdure.store.offload import FileObjectStore, Offload, from_environment, object_store


def _pipeline(tmp_path: Path, above: int = 100) -> Payloads:
    return Payloads(offload=Offload(FileObjectStore(tmp_path), above))


def test_a_payload_over_the_size_becomes_a_reference_and_opens_back(tmp_path: Path) -> None:
    payloads = _pipeline(tmp_path)
    text = json.dumps({"text": "x" * 500})
    sealed = payloads.seal(text)
    assert sealed is not None and len(sealed) < 250
    header = json.loads(sealed)["$perdure"]
    assert set(header) == {"v", "ref", "sha256", "size"} and header["size"] == len(text)
    pending = payloads.take_pending()
    assert [p.data for p in pending] == [text.encode()]
    assert payloads.take_pending() == []
    payloads.offload.upload(pending)  # type: ignore[union-attr]
    assert pending == []  # emptied as uploaded: the bytes are not kept
    assert payloads.open(json.loads(sealed)) == {"text": "x" * 500}


def test_a_payload_at_the_size_stays_in_the_row(tmp_path: Path) -> None:
    payloads = _pipeline(tmp_path, above=12)
    assert payloads.seal('"1234567890"') == '"1234567890"'
    assert payloads.take_pending() == []
    assert payloads.seal('"12345678901"') != '"12345678901"'


def test_a_reference_to_another_store_or_to_a_reference_is_undecodable(tmp_path: Path) -> None:
    payloads = _pipeline(tmp_path)
    other = {"$perdure": {"v": 1, "ref": "s3://elsewhere/x", "sha256": "0" * 64, "size": 1}}
    opened = payloads.open(other)
    assert isinstance(opened, Undecodable) and "not in the configured object store" in opened
    inner = json.dumps(other).encode()
    import hashlib

    (tmp_path / "loop").write_bytes(inner)
    looping = {
        "$perdure": {
            "v": 1,
            "ref": f"{payloads.offload.base}loop",  # type: ignore[union-attr]
            "sha256": hashlib.sha256(inner).hexdigest(),
            "size": len(inner),
        }
    }
    opened = payloads.open(looping)
    assert isinstance(opened, Undecodable) and "references another" in opened


def test_an_escaping_name_is_refused(tmp_path: Path) -> None:
    payloads = _pipeline(tmp_path / "store")
    (tmp_path / "secret").write_bytes(b'"secret"')
    ref = {"$perdure": {"v": 1, "ref": f"file://{tmp_path}/store/../secret", "sha256": "0"}}
    assert isinstance(payloads.open(ref), Undecodable)


def test_configuration_from_the_environment(tmp_path: Path) -> None:
    assert from_environment({}) is None
    made = from_environment({"PERDURE_OFFLOAD_URL": f"file://{tmp_path}"})
    assert made is not None and made.above == 256 * 1024
    made = from_environment(
        {"PERDURE_OFFLOAD_URL": f"file://{tmp_path}", "PERDURE_OFFLOAD_ABOVE": "10"}
    )
    assert made is not None and made.above == 10
    with pytest.raises(ConfigurationError, match="PERDURE_OFFLOAD_ABOVE"):
        from_environment({"PERDURE_OFFLOAD_URL": "file:///x", "PERDURE_OFFLOAD_ABOVE": "big"})
    with pytest.raises(ConfigurationError, match="bucket"):
        object_store("s3:///nobucket")
    with pytest.raises(ConfigurationError, match="must be local"):
        object_store("file://host/path")


def _written(payloads: Payloads, text: str) -> dict[str, object]:
    """The reference row of payload JSON ``text``, its object uploaded."""
    sealed = payloads.seal(text)
    assert sealed is not None
    payloads.offload.upload(payloads.take_pending())  # type: ignore[union-attr]
    envelope: dict[str, object] = json.loads(sealed)
    return envelope


@pytest.mark.parametrize(
    "value", ["x" * 500, 'say "hi"\\n' + "x" * 500, "tab\there " + "é" * 300, "x" * 500 + "\n"]
)
def test_an_offloaded_text_opens_back_as_written_escaped_or_not(tmp_path: Path, value: str) -> None:
    payloads = _pipeline(tmp_path)
    assert payloads.open(_written(payloads, json.dumps(value, ensure_ascii=False))) == value


@pytest.mark.parametrize("where", ["middle", "first", "last"])
def test_an_altered_offloaded_text_is_undecodable_however_it_was_altered(
    tmp_path: Path, where: str
) -> None:
    payloads = _pipeline(tmp_path)
    envelope = _written(payloads, json.dumps("x" * 500))
    [path] = [p for p in tmp_path.iterdir() if not p.name.startswith(".")]
    data = bytearray(path.read_bytes())
    index = {"middle": len(data) // 2, "first": 1, "last": len(data) - 2}[where]
    data[index] = ord("\x01")  # a control character where a letter was: no escape, no quote
    path.write_bytes(bytes(data))
    opened = payloads.open(envelope)
    assert isinstance(opened, Undecodable) and "sha256 mismatch" in opened
