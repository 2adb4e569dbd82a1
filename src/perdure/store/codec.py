"""The payload codec: the one transformation every payload passes through to and from the database.

Every input, output, step result, signal value, event and stream value, step
log and error record that a statement writes is sealed here (``seal``), and
every row a statement reads is opened here (``open_rows``) before anything
else sees it. ``Builder`` (store/statement.py) calls both, so no statement
can skip it.

A sealed payload is still JSON (the columns are ``jsonb``), an envelope::

    {"$perdure": {"v": 1, "zip": "zlib", "codec": "aes256gcm", "key": "k2"},
     "data": "<base64>"}

``data`` is the payload's JSON text, compressed (``zip``) when it is over
``compress_above`` bytes and smaller that way, then encoded by the ``codec``
named (AES-256-GCM, see ``store/encryption.py``, or one of the user's). A value
with no envelope is plain JSON and is read as it is: runs started from SQL,
rows written before a codec was configured. Other keys next to an envelope
(SQL adds ``available_at`` to a release's detail) stay plain and are merged
into the opened value.

Opening never raises. A payload whose key this process does not hold reads as
an ``Encrypted`` marker (``"encrypted (key k2)"``); one that cannot be opened
(altered ciphertext, unknown codec, a corrupt envelope) as an ``Undecodable``.
Both are the markers the engine's poison rules already know: a run whose data
is one fails alone, and listings show the text.
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import threading
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from perdure.errors import ConfigurationError, KeyUnavailable, ObjectStoreError
from perdure.store.loaders import Undecodable, too_deep, undecodable
from perdure.store.offload import Offload, Pending

__all__ = [
    "ENVELOPE",
    "PLAIN",
    "Codec",
    "Encoded",
    "Encrypted",
    "Offloaded",
    "Payloads",
    "Sealed",
    "UnreadableRecord",
    "opened",
    "record",
    "unreadable",
]

#: The key that marks an envelope; a plain payload whose top level has it is escaped.
ENVELOPE = "$perdure"
#: The envelope's format version.
VERSION = 1
#: No payload decompresses to more than this (a zip bomb reads as undecodable).
MAX_OPENED_BYTES = 128 * 1024 * 1024
_MARK = '"' + ENVELOPE + '"'


@dataclass(frozen=True, slots=True)
class Encoded:
    """What a codec made of a payload's bytes, and the id of the key it used (if any).

    The key id is written in the envelope, in clear: it is what a reader
    without that key is shown (``encrypted (key k2)``), and what ``decode``
    is handed back to pick the key.
    """

    data: bytes
    key: str | None = None


@runtime_checkable
class Codec(Protocol):
    """A transformation of payload bytes: encryption, a KMS, anything reversible.

    ``name`` is written in each envelope the codec encodes, and selects the
    codec that decodes it. ``encode`` and ``decode`` run in the statement's
    thread of control, once per payload: keep them synchronous and quick
    (a KMS codec caches its data keys). ``decode`` raises ``KeyUnavailable``
    when it lacks the key of ``encoded.key``, and any other exception when
    the bytes are not its own or were altered; neither reaches a caller.
    """

    name: str

    def encode(self, data: bytes) -> Encoded:
        """The encoded form of ``data``, with the id of the key used."""
        ...

    def decode(self, encoded: Encoded) -> bytes:
        """``data`` back from what ``encode`` made of it."""
        ...


class Encrypted(Undecodable):
    """A payload encrypted with a key this process does not hold.

    It reads ``"encrypted (key k2)"`` in every listing, page and JSON answer;
    the engine fails a run that needs it with ``UndecodablePayload``.
    """

    key: str

    def __new__(cls, key: str) -> Encrypted:
        """The marker of a payload encrypted with key ``key``."""
        made = str.__new__(cls, f"encrypted (key {key})")
        made.key = key
        made.reason = (
            f"encrypted with key {key!r}, which this process does not hold "
            "(configure it in PERDURE_ENCRYPTION_KEYS or PERDURE_ENCRYPTION_KEY_FILE)"
        )
        return made

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return (Encrypted, (self.key,))


class UnreadableRecord(dict[str, Any]):
    """An error record or history detail that could not be opened, as a record saying so.

    Where a record is expected (``Run.error``, ``Step.error``,
    ``HistoryEvent.detail``) a marker reads as ``{"type": "encrypted",
    "message": "encrypted (key k2)"}`` (or ``"undecodable"``), so that every
    reader of records shows it; ``marker`` keeps the ``Undecodable`` for the
    engine's poison rules.
    """

    marker: Undecodable


def record(value: Any) -> Any:
    """``value``; an ``Undecodable`` marker in place of a record becomes an UnreadableRecord."""
    if not isinstance(value, Undecodable):
        return value
    kind = "encrypted" if isinstance(value, Encrypted) else "undecodable"
    made = UnreadableRecord(type=kind, message=str(value))
    made.marker = value
    return made


def unreadable(value: Any) -> Undecodable | None:
    """The marker ``value`` is or carries (a value or a record that could not be read), or None."""
    if isinstance(value, Undecodable):
        return value
    if isinstance(value, UnreadableRecord):
        return value.marker
    return None


class Payloads:
    """The codec pipeline of one App: compression above a size, then one codec.

    ``codecs`` are newest last: the last encodes every new payload, every one
    decodes the envelopes that name it (so a change of codec needs no
    rewrite). With no codec and no compression, payloads are stored as plain
    JSON, as without a codec at all.
    """

    def __init__(
        self,
        codecs: Sequence[Codec] = (),
        *,
        compress_above: int | None = None,
        telemetry_payloads: bool = False,
        offload: Offload | None = None,
    ) -> None:
        """A pipeline encoding with the last of ``codecs``, compressing above ``compress_above``.

        ``telemetry_payloads``: error messages (which may carry user data)
        still go to logs and traces while payloads are encrypted.
        ``offload``: sealed payloads above its size go to its object store
        (store/offload.py); the row keeps a reference.
        """
        for codec in codecs:
            if not isinstance(codec, Codec) or not isinstance(getattr(codec, "name", None), str):
                raise ConfigurationError(
                    f"a codec needs a name and encode/decode methods, not {codec!r}"
                )
        if compress_above is not None and (
            isinstance(compress_above, bool)
            or not isinstance(compress_above, int)
            or compress_above < 0
        ):
            raise ConfigurationError(
                f"compress_above must be a number of bytes (0 or more), not {compress_above!r}"
            )
        self.codec: Codec | None = codecs[-1] if codecs else None
        self.decoders = {codec.name: codec for codec in codecs}
        self.compress_above = compress_above
        self.telemetry_payloads = telemetry_payloads
        self.offload = offload
        self._pending = threading.local()

    @property
    def encrypts(self) -> bool:
        """Whether new payloads are encoded by a codec (not only compressed)."""
        return self.codec is not None

    @property
    def redacts_errors(self) -> bool:
        """Whether logs and traces name an error's type without its message.

        True while payloads are encrypted, unless ``PERDURE_TELEMETRY_PAYLOADS=1``
        asks for the messages: an error message often quotes the data it failed on.
        """
        return self.encrypts and not self.telemetry_payloads

    @property
    def plain(self) -> bool:
        """Whether new payloads are stored as plain JSON."""
        return self.codec is None and self.compress_above is None and self.offload is None

    def __repr__(self) -> str:
        names = ",".join(self.decoders) or "none"
        return (
            f"Payloads(codecs={names}, compress_above={self.compress_above}, "
            f"offload={self.offload!r})"
        )

    # Writing -------------------------------------------------------------------

    def seal(self, text: str | None) -> str | None:
        """The stored form of payload JSON ``text``: itself, or its envelope (None stays None).

        With an offload, a sealed form above its size is replaced by a
        reference; the object to upload waits in ``take_pending`` (of this
        thread) until the statement carrying the reference takes it. A
        ``Sealed`` text (``offload_now`` made it) is stored as it is.
        """
        if type(text) is Sealed:
            return str.__str__(text)
        sealed = self._seal(text)
        offload = self.offload
        if sealed is None or offload is None or len(sealed) <= offload.above:
            return sealed
        data = sealed.encode("utf-8")
        if len(data) <= offload.above:
            return sealed
        header, pending = offload.header(data)
        queue: list[Pending] | None = getattr(self._pending, "queue", None)
        if queue is None:
            queue = self._pending.queue = []
        queue.append(pending)
        return _reference(header)

    def offloads(self, text: str) -> bool:
        """Whether payload JSON ``text`` is long enough to be worth ``offload_now``."""
        offload = self.offload
        return offload is not None and len(text) > offload.above

    def offload_now(self, text: str) -> str:
        """``text`` sealed, and uploaded now if its sealed form is over the offload size:
        the ``Sealed`` text (a reference) to write in its row instead. Blocking (call it
        in a thread); ObjectStoreError when the upload fails.

        The object is written before any row names it, as for ``seal``; writing it
        before the statement is built lets its bytes go as soon as it is stored.
        """
        sealed = self._seal(text)
        offload = self.offload
        if sealed is None or offload is None:
            return text
        data = sealed.encode("utf-8")
        if len(data) <= offload.above:
            return Sealed(sealed)
        del sealed
        header, pending = offload.header(data)
        del data
        offload.upload([pending])
        return Sealed(_reference(header))

    def take_pending(self) -> list[Pending]:
        """The objects sealed by this thread since the last call, to upload before the row."""
        queue: list[Pending] | None = getattr(self._pending, "queue", None)
        if not queue:
            return []
        self._pending.queue = []
        return queue

    def _seal(self, text: str | None) -> str | None:
        if text is None:
            return None
        if self.codec is None and (self.compress_above is None or len(text) <= self.compress_above):
            return _escaped(text)
        header: dict[str, Any] = {"v": VERSION}
        data = text.encode("utf-8")
        if self.compress_above is not None and len(data) > self.compress_above:
            packed = zlib.compress(data, 6)
            if len(packed) < len(data):
                data = packed
                header["zip"] = "zlib"
        if self.codec is not None:
            encoded = self.codec.encode(data)
            data = encoded.data
            header["codec"] = self.codec.name
            if encoded.key is not None:
                header["key"] = encoded.key
        elif "zip" not in header:
            return _escaped(text)
        return _envelope(header, data)

    def seal_each(self, texts: Iterable[str | None]) -> list[str | None]:
        """``seal`` of each of ``texts``, in order."""
        return [self.seal(text) for text in texts]

    # Reading -------------------------------------------------------------------

    def open(self, value: Any) -> Any:
        """The payload ``value`` holds: itself when plain, else opened (or a marker)."""
        if type(value) is not dict or ENVELOPE not in value:
            return value
        header = value[ENVELOPE]
        if isinstance(header, dict) and "ref" in header:
            opened = self._fetch(header)
        else:
            opened = self._open(header, value.get("data"))
        if len(value) > 2 and isinstance(opened, dict):
            extra = {k: v for k, v in value.items() if k not in (ENVELOPE, "data")}
            opened = {**extra, **opened}
        return opened

    def open_rows(
        self, rows: list[dict[str, Any]], lazy: tuple[str, ...] = ()
    ) -> list[dict[str, Any]]:
        """``rows`` with every envelope among their columns opened, in place.

        In the ``lazy`` columns an offloaded payload is not fetched: it becomes
        an ``Offloaded`` reference, fetched when its reader opens it.
        """
        for row in rows:
            for column, value in row.items():
                if type(value) is dict and ENVELOPE in value:
                    if column in lazy and _offloaded(value):
                        row[column] = Offloaded(value, self)
                    else:
                        row[column] = self.open(value)
        return rows

    def lazily(self, lazy: tuple[str, ...]) -> Callable[[list[dict[str, Any]]], list[Any]]:
        """``open_rows`` leaving the offloaded payloads of the ``lazy`` columns unfetched."""
        return functools.partial(self.open_rows, lazy=lazy)

    def references(self, rows: list[dict[str, Any]]) -> bool:
        """Whether any column of ``rows`` is an offloaded envelope (opening it fetches)."""
        if self.offload is None:
            return False
        for row in rows:
            for value in row.values():
                if type(value) is dict and type(value.get(ENVELOPE)) is dict:
                    if "ref" in value[ENVELOPE]:
                        return True
        return False

    def _fetch(self, header: dict[str, Any]) -> Any:
        """The payload an offloaded envelope references, fetched and opened (or a marker)."""
        if self.offload is None:
            return Undecodable(
                f"offloaded to {header.get('ref')!r}, but no object store is configured here "
                "(set PERDURE_OFFLOAD_URL)"
            )
        try:
            raw = self.offload.fetch(header)
        except ObjectStoreError as exc:
            return Undecodable(str(exc))
        if raw[:1] == b'"' and raw[-1:] == b'"' and len(raw) > 1 and _unescaped(raw):
            # A string with nothing escaped (a large text's usual form): no parse.
            try:
                return str(memoryview(raw)[1:-1], "utf-8")
            except UnicodeDecodeError as exc:
                return undecodable(exc)
        if too_deep(raw):
            return Undecodable("nested too deeply to decode")
        try:
            inner = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            return undecodable(exc)
        if type(inner) is dict and ENVELOPE in inner:
            if isinstance(inner[ENVELOPE], dict) and "ref" in inner[ENVELOPE]:
                return Undecodable("an offloaded payload that references another")
            return self.open(inner)
        return inner

    def _open(self, header: Any, data: Any) -> Any:
        if not isinstance(header, dict) or not isinstance(data, str):
            return Undecodable("a malformed $perdure envelope")
        if header.get("v") != VERSION:
            return Undecodable(f"an envelope of unknown version {header.get('v')!r}")
        try:
            raw = base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return Undecodable("an envelope whose data is not base64")
        name, key = header.get("codec"), header.get("key")
        if key is not None and not isinstance(key, str):
            return Undecodable("an envelope with a malformed key id")
        if name is not None:
            codec = self.decoders.get(name)
            if codec is None:
                if key is not None:
                    return Encrypted(key)
                return Undecodable(f"encoded by codec {name!r}, which is not configured here")
            try:
                raw = codec.decode(Encoded(raw, key))
            except KeyUnavailable as exc:
                return Encrypted(exc.key)
            except Exception as exc:
                why = str(exc) or type(exc).__name__
                return Undecodable(f"codec {name!r} (key {key}) could not decode it: {why}"[:200])
        zipped = header.get("zip")
        if zipped == "zlib":
            raw_or_marker = _inflate(raw)
            if isinstance(raw_or_marker, Undecodable):
                return raw_or_marker
            raw = raw_or_marker
        elif zipped is not None:
            return Undecodable(f"compressed with {zipped!r}, which perdure does not know")
        if too_deep(raw):
            return Undecodable("nested too deeply to decode")
        try:
            return json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            return undecodable(exc)


class Sealed(str):
    """Payload text already sealed (and its object uploaded): ``seal`` stores it as it is."""

    __slots__ = ()


class Offloaded:
    """An offloaded payload read without fetching it: ``open()`` fetches it (blocking).

    Only the engine's replay reads rows this way (``open_rows``'s ``lazy``
    columns), so that a run holding many large results holds their
    references, not their bytes. ``open`` returns what ``Payloads.open``
    would have: the value, or an ``Undecodable`` marker.
    """

    __slots__ = ("envelope", "payloads")

    def __init__(self, envelope: dict[str, Any], payloads: Payloads) -> None:
        """The reference ``envelope``, opened through ``payloads``."""
        self.envelope = envelope
        self.payloads = payloads

    def __repr__(self) -> str:
        return f"Offloaded({self.envelope[ENVELOPE].get('ref')!r})"

    @property
    def size(self) -> int | None:
        """The stored object's size in bytes, as its reference says."""
        size = self.envelope[ENVELOPE].get("size")
        return size if isinstance(size, int) else None

    def open(self) -> Any:
        """The payload, fetched and opened now (or an Undecodable marker)."""
        return self.payloads.open(self.envelope)


def opened(value: Any) -> Any:
    """``value``, or the payload it references opened (fetched) if it is an ``Offloaded``."""
    return value.open() if type(value) is Offloaded else value


def _unescaped(raw: bytes) -> bool:
    """Whether the JSON string text ``raw`` (quoted) holds no escape and no inner quote.

    ``raw`` is an object whose sha256 matched its reference: the bytes perdure's
    encoder wrote, which escapes every control character. So unlike ``verbatim``
    (text from elsewhere), no scan for control characters: two ``memchr``s.
    """
    return raw.find(b"\\", 1, -1) < 0 and raw.find(b'"', 1, -1) < 0


def _offloaded(value: dict[str, Any]) -> bool:
    """Whether envelope ``value`` references an object."""
    header = value[ENVELOPE]
    return type(header) is dict and "ref" in header


def _reference(header: dict[str, Any]) -> str:
    """The JSON text of an offloaded envelope."""
    return '{"' + ENVELOPE + '":' + json.dumps(header, separators=(",", ":")) + "}"


@functools.lru_cache(maxsize=256)
def _prefix(header: tuple[tuple[str, Any], ...]) -> str:
    """The text of an envelope up to its data, for one header (few distinct ones)."""
    return '{"' + ENVELOPE + '":' + json.dumps(dict(header), separators=(",", ":")) + ',"data":"'


def _envelope(header: dict[str, Any], data: bytes) -> str:
    """The JSON text of an envelope of ``data`` under ``header`` (base64 needs no escaping)."""
    return _prefix(tuple(header.items())) + base64.b64encode(data).decode("ascii") + '"}'


def _escaped(text: str) -> str:
    """Plain ``text``, or, if its top level has the envelope's key, an envelope of it.

    Only then: a user's own ``{"$perdure": ...}`` must not read as an envelope.
    """
    if text[:1] != "{" or _MARK not in text:
        return text
    value = json.loads(text)
    if not isinstance(value, dict) or ENVELOPE not in value:
        return text
    return _envelope({"v": VERSION}, text.encode("utf-8"))


def _inflate(raw: bytes) -> bytes | Undecodable:
    """``raw`` decompressed, or why it cannot be."""
    inflater = zlib.decompressobj()
    try:
        out = inflater.decompress(raw, MAX_OPENED_BYTES)
    except zlib.error as exc:
        return Undecodable(f"corrupt compressed data ({exc})")
    if inflater.unconsumed_tail:
        return Undecodable(f"decompresses to more than {MAX_OPENED_BYTES} bytes")
    if not inflater.eof:
        return Undecodable("truncated compressed data")
    return out


#: The pipeline of a process with no codec: plain JSON written, envelopes opened where possible.
PLAIN = Payloads()
