"""The payload codec alone: envelopes, keys, rotation, compression and every way opening fails.

No database: what ``Payloads.seal`` writes and ``Payloads.open`` reads back,
and the keys ``store/encryption.py`` takes from configuration.
"""

from __future__ import annotations

import base64
import json
import zlib
from pathlib import Path

import pytest

from perdure.errors import ConfigurationError, KeyUnavailable
from perdure.store.codec import Encoded, Encrypted, Payloads
from perdure.store.encryption import (
    AesGcm,
    codec_from_environment,
    generate_key_line,
    parse_keys,
    payloads,
)
from perdure.store.loaders import Undecodable

K1, K2 = generate_key_line("k1"), generate_key_line("k2")


def _roundtrip(pipeline: Payloads, text: str) -> object:
    sealed = pipeline.seal(text)
    assert sealed is not None
    return pipeline.open(json.loads(sealed))


def test_a_plain_pipeline_stores_json_as_it_is() -> None:
    plain = Payloads()
    assert plain.seal('{"a":1}') == '{"a":1}'
    assert plain.seal(None) is None
    assert plain.open({"a": 1}) == {"a": 1}


def test_a_plain_payload_that_looks_like_an_envelope_is_wrapped_not_misread() -> None:
    text = '{"data":"x","$perdure":{"v":1,"codec":"aes256gcm","key":"k9"}}'
    sealed = Payloads().seal(text)
    assert sealed != text and sealed is not None
    assert Payloads().open(json.loads(sealed)) == json.loads(text)


def test_encryption_round_trips_and_hides_the_text() -> None:
    pipeline = Payloads([AesGcm.from_text(K1)])
    sealed = pipeline.seal('{"card":"4111"}')
    assert sealed is not None and "4111" not in sealed
    stored = json.loads(sealed)
    assert stored["$perdure"] == {"v": 1, "codec": "aes256gcm", "key": "k1"}
    assert pipeline.open(stored) == {"card": "4111"}
    # Fresh nonce each time: the same payload never encrypts the same way twice.
    assert pipeline.seal('{"card":"4111"}') != sealed


def test_the_newest_key_encrypts_and_every_key_decrypts() -> None:
    old = Payloads([AesGcm.from_text(K1)])
    rotated = Payloads([AesGcm.from_text(f"{K1},{K2}")])
    written_before = json.loads(old.seal('"before"') or "")
    written_after = json.loads(rotated.seal('"after"') or "")
    assert written_after["$perdure"]["key"] == "k2"
    assert rotated.open(written_before) == "before"
    assert rotated.open(written_after) == "after"
    # The old process cannot read what the new key wrote: it says which key it lacks.
    lacking = old.open(written_after)
    assert isinstance(lacking, Encrypted) and lacking == "encrypted (key k2)"
    assert isinstance(lacking, Undecodable) and "k2" in lacking.reason


def test_without_any_codec_an_encrypted_payload_reads_as_encrypted() -> None:
    sealed = json.loads(Payloads([AesGcm.from_text(K2)]).seal('"x"') or "")
    assert Payloads().open(sealed) == "encrypted (key k2)"


def _flip(data: str) -> str:
    """``data`` with its first character changed."""
    return ("B" if data[0] == "A" else "A") + data[1:]


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        (lambda e: {**e, "data": _flip(e["data"])}, "authentication failed"),
        (lambda e: {**e, "$perdure": {**e["$perdure"], "key": "k1x"}}, "encrypted (key k1x)"),
        (lambda e: {**e, "data": "not base64!"}, "not base64"),
        (lambda e: {**e, "data": base64.b64encode(b"short").decode()}, "too short"),
        (lambda e: {**e, "$perdure": {"v": 2}}, "unknown version"),
        (lambda e: {**e, "$perdure": "text"}, "malformed"),
        (lambda e: {"$perdure": e["$perdure"]}, "malformed"),
        (lambda e: {**e, "$perdure": {**e["$perdure"], "codec": "rot13"}}, "encrypted (key k1)"),
        (lambda e: {**e, "$perdure": {"v": 1, "codec": "rot13"}}, "'rot13', which is not"),
        (lambda e: {**e, "$perdure": {**e["$perdure"], "zip": "lzma"}}, "'lzma'"),
    ],
)
def test_an_altered_envelope_reads_as_a_marker_never_a_value_nor_an_exception(
    change: object, reason: str
) -> None:
    pipeline = Payloads([AesGcm.from_text(K1)])
    stored = json.loads(pipeline.seal('{"a":"b"}') or "")
    opened = pipeline.open(change(stored))  # type: ignore[operator]
    assert isinstance(opened, Undecodable), opened
    assert reason in str(opened), opened


def test_compression_applies_above_the_size_and_only_when_it_helps() -> None:
    pipeline = Payloads(compress_above=100)
    small, big = '"' + "x" * 50 + '"', '"' + "x" * 5000 + '"'
    assert pipeline.seal(small) == small
    sealed = json.loads(pipeline.seal(big) or "")
    assert sealed["$perdure"] == {"v": 1, "zip": "zlib"} and len(sealed["data"]) < 200
    assert pipeline.open(sealed) == "x" * 5000
    # zlib makes a short payload longer: it is stored plain.
    assert Payloads(compress_above=0).seal('"abc"') == '"abc"'


def test_compression_then_encryption_round_trips() -> None:
    pipeline = Payloads([AesGcm.from_text(K1)], compress_above=10)
    sealed = json.loads(pipeline.seal(json.dumps(["abc"] * 1000)) or "")
    assert sealed["$perdure"] == {"v": 1, "zip": "zlib", "codec": "aes256gcm", "key": "k1"}
    assert pipeline.open(sealed) == ["abc"] * 1000


def test_a_decompression_bomb_reads_as_undecodable(monkeypatch: pytest.MonkeyPatch) -> None:
    from perdure.store import codec

    monkeypatch.setattr(codec, "MAX_OPENED_BYTES", 1000)
    bomb = {"$perdure": {"v": 1, "zip": "zlib"}, "data": ""}
    bomb["data"] = base64.b64encode(zlib.compress(b"[" + b"0," * 10000 + b"0]")).decode()
    opened = Payloads().open(bomb)
    assert isinstance(opened, Undecodable) and "more than 1000 bytes" in opened
    truncated = {**bomb, "data": base64.b64encode(zlib.compress(b'"abc"')[:-3]).decode()}
    assert isinstance(Payloads().open(truncated), Undecodable)


def test_keys_sql_added_beside_an_envelope_stay_and_merge() -> None:
    pipeline = Payloads([AesGcm.from_text(K1)])
    stored = json.loads(pipeline.seal('{"step":"charge","delay":2}') or "")
    # What task_release's history detail does: jsonb_build_object(...) || detail.
    merged = {"available_at": "2026-01-01T00:00:00Z", **stored}
    assert pipeline.open(merged) == {
        "available_at": "2026-01-01T00:00:00Z",
        "step": "charge",
        "delay": 2,
    }


def test_open_rows_opens_each_column_that_holds_an_envelope() -> None:
    pipeline = Payloads([AesGcm.from_text(K1)])
    rows = [
        {"id": 1, "input": json.loads(pipeline.seal('"a"') or ""), "tags": {"t": "x"}},
        {"id": 2, "input": "plain", "tags": None},
    ]
    assert pipeline.open_rows(rows) == [
        {"id": 1, "input": "a", "tags": {"t": "x"}},
        {"id": 2, "input": "plain", "tags": None},
    ]


class _Reverse:
    """A user's codec: reverses the bytes, under key 'r1'."""

    name = "reverse"

    def encode(self, data: bytes) -> Encoded:
        return Encoded(data[::-1], "r1")

    def decode(self, encoded: Encoded) -> bytes:
        if encoded.key != "r1":
            raise KeyUnavailable(encoded.key or "?")
        return encoded.data[::-1]


def test_a_users_codec_plugs_in_and_the_environments_keys_still_decrypt() -> None:
    written_with_aes = json.loads(Payloads([AesGcm.from_text(K1)]).seal('"old"') or "")
    pipeline = payloads(_Reverse(), environ={"PERDURE_ENCRYPTION_KEYS": K1})
    assert pipeline.codec is not None and pipeline.codec.name == "reverse"
    sealed = json.loads(pipeline.seal('"new"') or "")
    assert sealed["$perdure"] == {"v": 1, "codec": "reverse", "key": "r1"}
    assert pipeline.open(sealed) == "new"
    assert pipeline.open(written_with_aes) == "old"
    other_key = {**sealed, "$perdure": {**sealed["$perdure"], "key": "r2"}}
    assert pipeline.open(other_key) == "encrypted (key r2)"


def test_a_codec_that_is_not_one_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="a codec needs a name"):
        Payloads([object()])  # type: ignore[list-item]
    with pytest.raises(ConfigurationError, match="compress_above"):
        Payloads(compress_above=-1)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no encryption key"),
        ("k1", "not written id:base64"),
        ("k1:***", "not valid base64"),
        ("k1:" + base64.b64encode(b"x" * 16).decode(), "must be 32 bytes"),
        ("bad id:" + base64.b64encode(b"x" * 32).decode(), "invalid encryption key id"),
        (f"{K1},{K1}", "given twice"),
    ],
)
def test_bad_keys_are_refused_without_showing_the_key(text: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as refused:
        AesGcm.from_text(text)
    secret = text.partition(":")[2]
    if len(secret) > 8:
        assert secret not in str(refused.value)


def test_keys_come_from_the_variable_or_a_file_not_both(tmp_path: Path) -> None:
    keys = tmp_path / "keys"
    keys.write_text(f"# rotated 2026-11\n{K1}\n\n{K2}  # newest\n")
    from_file = codec_from_environment({"PERDURE_ENCRYPTION_KEY_FILE": str(keys)})
    assert from_file is not None and from_file.key_ids == ("k1", "k2") and from_file.newest == "k2"
    inline = codec_from_environment({"PERDURE_ENCRYPTION_KEYS": f"{K1}, {K2}"})
    assert inline is not None and inline.key_ids == ("k1", "k2")
    assert codec_from_environment({}) is None
    with pytest.raises(ConfigurationError, match="not both"):
        codec_from_environment(
            {"PERDURE_ENCRYPTION_KEYS": K1, "PERDURE_ENCRYPTION_KEY_FILE": str(keys)}
        )
    with pytest.raises(ConfigurationError, match="cannot read"):
        codec_from_environment({"PERDURE_ENCRYPTION_KEY_FILE": str(tmp_path / "missing")})
    assert parse_keys(K1)[0][0] == "k1"


def test_compression_and_telemetry_settings_come_from_the_environment() -> None:
    pipeline = payloads(environ={"PERDURE_COMPRESS_ABOVE": "2048"})
    assert pipeline.compress_above == 2048 and not pipeline.encrypts
    with pytest.raises(ConfigurationError, match="PERDURE_COMPRESS_ABOVE"):
        payloads(environ={"PERDURE_COMPRESS_ABOVE": "big"})
    keyed = payloads(environ={"PERDURE_ENCRYPTION_KEYS": K1})
    assert keyed.encrypts and keyed.redacts_errors
    asked = payloads(environ={"PERDURE_ENCRYPTION_KEYS": K1, "PERDURE_TELEMETRY_PAYLOADS": "1"})
    assert not asked.redacts_errors


def test_perdure_keys_generate_prints_a_usable_key_line() -> None:
    from click.testing import CliRunner

    from perdure.cli.main import cli

    made = CliRunner().invoke(cli, ["keys", "generate", "--id", "k7"])
    assert made.exit_code == 0, made.output
    line = made.stdout.strip().splitlines()[0]
    assert line.startswith("k7:")
    assert AesGcm.from_text(line).newest == "k7"
    refused = CliRunner().invoke(cli, ["keys", "generate", "--id", "no spaces"])
    assert refused.exit_code != 0 and "invalid encryption key id" in refused.output
