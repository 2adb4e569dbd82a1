"""AES-256-GCM payload encryption, and the keys it takes from configuration.

Keys have ids. ``AesGcm`` encrypts with the newest key (the last given) and
decrypts with every key it holds, so a key is rotated by adding a new one:
old payloads still read, new ones use the new key, nothing is rewritten.

Each payload gets a fresh 96-bit random nonce; the stored bytes are
``nonce || ciphertext || tag``. The associated data binds the ciphertext to
the envelope's header (``perdure:v1:aes256gcm:<key id>``): changing the key
id, the ciphertext or the tag fails the authentication, and the payload reads
as undecodable. It does not bind a payload to its run: perdure copies stored
values between runs in SQL (events and streams published from checkpoints,
fork and restart), and must not have to decrypt to do so.

Keys reach a process by configuration only, never through the database:
``PERDURE_ENCRYPTION_KEYS`` (``k1:<base64>,k2:<base64>``, newest last) or
``PERDURE_ENCRYPTION_KEY_FILE`` (the same, one per line, ``#`` comments).
``PERDURE_COMPRESS_ABOVE`` (bytes) turns compression on. ``from_environment``
reads them; an App without ``codec=`` uses it.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from perdure.errors import ConfigurationError, KeyUnavailable
from perdure.store.codec import Codec, Encoded, Payloads
from perdure.store.offload import ObjectStore
from perdure.store.offload import from_environment as offload_from_environment

#: The variable holding the keys, ``id:base64`` separated by commas, newest last.
KEYS_ENV = "PERDURE_ENCRYPTION_KEYS"
#: The variable naming a file of keys, one ``id:base64`` per line, newest last.
KEY_FILE_ENV = "PERDURE_ENCRYPTION_KEY_FILE"
#: The variable turning compression on above a size, in bytes.
COMPRESS_ENV = "PERDURE_COMPRESS_ABOVE"
#: ``1``: error messages go to logs and traces even while payloads are encrypted.
TELEMETRY_ENV = "PERDURE_TELEMETRY_PAYLOADS"
_KEY_ID = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_ID_RULE = "use 1-64 letters, digits, '_', '.' or '-'"
_NONCE_BYTES = 12


class AesGcm:
    """The built-in codec: AES-256-GCM under keys with ids, the newest encrypting.

    ``keys`` are ``(id, 32-byte key)`` pairs, newest last; ``from_text``
    parses ``k1:<base64>,k2:<base64>``. Needs ``cryptography``
    (``pip install 'perdure[encryption]'``).
    """

    name = "aes256gcm"

    def __init__(self, keys: Sequence[tuple[str, bytes]]) -> None:
        """A codec encrypting with the last of ``keys`` and decrypting with any."""
        try:
            from cryptography.exceptions import InvalidTag
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        except ImportError:  # pragma: no cover - the dev extra installs it
            raise ConfigurationError(
                "payload encryption needs the cryptography package: "
                "pip install 'perdure[encryption]'"
            ) from None
        if not keys:
            raise ConfigurationError("AesGcm needs at least one key")
        self._ciphers: dict[str, Any] = {}
        self._associated: dict[str, bytes] = {}
        self._invalid = InvalidTag
        for key_id, secret in keys:
            if not isinstance(key_id, str) or not _KEY_ID.fullmatch(key_id):
                raise ConfigurationError(f"invalid encryption key id {key_id!r}: {_ID_RULE}")
            if key_id in self._ciphers:
                raise ConfigurationError(f"encryption key id {key_id!r} is given twice")
            if not isinstance(secret, bytes) or len(secret) != 32:
                raise ConfigurationError(
                    f"encryption key {key_id!r} must be 32 bytes (AES-256); "
                    "make one with `perdure keys generate`"
                )
            self._ciphers[key_id] = AESGCM(secret)
            self._associated[key_id] = _associated(key_id)
        self.key_ids = tuple(self._ciphers)
        #: The id of the key new payloads are encrypted with.
        self.newest = self.key_ids[-1]

    @classmethod
    def from_text(cls, text: str) -> AesGcm:
        """The codec of keys written ``id:base64`` separated by commas or lines, newest last."""
        return cls(parse_keys(text))

    def __repr__(self) -> str:
        return f"AesGcm(keys={list(self.key_ids)!r})"

    def encode(self, data: bytes) -> Encoded:
        """``data`` encrypted with the newest key, under a fresh nonce."""
        nonce = os.urandom(_NONCE_BYTES)
        sealed = self._ciphers[self.newest].encrypt(nonce, data, self._associated[self.newest])
        return Encoded(nonce + sealed, self.newest)

    def decode(self, encoded: Encoded) -> bytes:
        """The plaintext of ``encoded``; KeyUnavailable without its key, ValueError if altered."""
        if encoded.key is None:
            raise ValueError("no key id in the envelope")
        cipher = self._ciphers.get(encoded.key)
        if cipher is None:
            raise KeyUnavailable(encoded.key)
        if len(encoded.data) < _NONCE_BYTES + 16:
            raise ValueError("ciphertext too short")
        nonce, sealed = encoded.data[:_NONCE_BYTES], encoded.data[_NONCE_BYTES:]
        try:
            data: bytes = cipher.decrypt(nonce, sealed, self._associated[encoded.key])
        except self._invalid:
            raise ValueError("authentication failed: the ciphertext was altered") from None
        return data


def _associated(key_id: str) -> bytes:
    """The associated data of a payload encrypted with ``key_id``."""
    return f"perdure:v1:aes256gcm:{key_id}".encode()


def parse_keys(text: str) -> list[tuple[str, bytes]]:
    """``[(id, key)]`` from ``id:base64`` items separated by commas or lines, newest last.

    Blank lines and ``#`` comments are skipped. A malformed item raises
    ConfigurationError naming its id (or place), never its key material.
    """
    found: list[tuple[str, bytes]] = []
    items = [
        item.strip()
        for line in text.splitlines()
        for item in line.split("#", 1)[0].split(",")
        if item.strip()
    ]
    for place, item in enumerate(items, 1):
        key_id, colon, encoded = item.partition(":")
        if not colon:
            raise ConfigurationError(
                f"encryption key {place} is not written id:base64 (e.g. k1:...); "
                "make one with `perdure keys generate`"
            )
        try:
            secret = base64.b64decode(encoded.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ConfigurationError(
                f"encryption key {key_id.strip()!r} is not valid base64"
            ) from None
        found.append((key_id.strip(), secret))
    if not found:
        raise ConfigurationError("no encryption key given")
    return found


def generate_key_line(key_id: str) -> str:
    """A new random key written ``id:base64``, for PERDURE_ENCRYPTION_KEYS."""
    if not _KEY_ID.fullmatch(key_id):
        raise ConfigurationError(f"invalid encryption key id {key_id!r}: {_ID_RULE}")
    return f"{key_id}:{base64.b64encode(secrets.token_bytes(32)).decode('ascii')}"


def codec_from_environment(environ: Mapping[str, str] | None = None) -> AesGcm | None:
    """The AES codec of the keys configured in the environment, or None without any."""
    env = os.environ if environ is None else environ
    inline, path = env.get(KEYS_ENV, "").strip(), env.get(KEY_FILE_ENV, "").strip()
    if inline and path:
        raise ConfigurationError(f"set {KEYS_ENV} or {KEY_FILE_ENV}, not both")
    if path:
        try:
            inline = Path(path).read_text(encoding="utf-8")
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read {KEY_FILE_ENV} {path!r}: {exc.strerror or exc}"
            ) from None
    return AesGcm.from_text(inline) if inline else None


def compress_from_environment(environ: Mapping[str, str] | None = None) -> int | None:
    """The size above which payloads are compressed (``PERDURE_COMPRESS_ABOVE``), or None."""
    env = os.environ if environ is None else environ
    text = env.get(COMPRESS_ENV, "").strip()
    if not text:
        return None
    try:
        size = int(text)
    except ValueError:
        raise ConfigurationError(
            f"{COMPRESS_ENV} must be a number of bytes, not {text!r}"
        ) from None
    if size < 0:
        raise ConfigurationError(f"{COMPRESS_ENV} must be 0 or more, not {size}")
    return size


def payloads(
    codec: Codec | Sequence[Codec] | None = None,
    compress_above: int | None = None,
    environ: Mapping[str, str] | None = None,
    *,
    offload: ObjectStore | str | None = None,
    offload_above: int | None = None,
) -> Payloads:
    """The pipeline of a process: the given codecs (newest last), with the environment's.

    Without ``codec``, the keys of the environment encrypt. With it, they
    still decrypt (a move from the built-in keys to a KMS needs no rewrite).
    ``compress_above`` None reads ``PERDURE_COMPRESS_ABOVE``. ``offload``
    (an ObjectStore or its URL) and ``offload_above`` default to
    ``PERDURE_OFFLOAD_URL`` and ``PERDURE_OFFLOAD_ABOVE`` (store/offload.py).
    """
    given: list[Codec] = (
        [] if codec is None else [codec] if not isinstance(codec, Sequence) else list(codec)
    )
    configured = codec_from_environment(environ)
    if configured is not None and all(c.name != configured.name for c in given):
        given.insert(0, configured)
    if compress_above is None:
        compress_above = compress_from_environment(environ)
    env = os.environ if environ is None else environ
    telemetry = env.get(TELEMETRY_ENV, "").strip() == "1"
    offloaded = offload_from_environment(env, store=offload, above=offload_above)
    return Payloads(
        given, compress_above=compress_above, telemetry_payloads=telemetry, offload=offloaded
    )
