"""Refusing hostile requests cheaply: body size, JSON depth, strict numbers and header values.

Each check runs before the work it protects: the size before the body is
held in memory (Content-Length first, then a cap while it streams in), the
depth before ``json.loads`` recurses, and header and query numbers with
ASCII digits only (``str.isdigit`` accepts ``'²'``, which ``int`` refuses).
"""

from __future__ import annotations

import re
from itertools import accumulate

from starlette.requests import ClientDisconnect, Request

from perdure.dashboard.api.problems import Problem
from perdure.engine.arguments import MAX_KEY_LENGTH
from perdure.engine.serialization import MAX_DEPTH

#: The largest request body accepted, in bytes.
MAX_BODY = 1024 * 1024
#: The deepest JSON body accepted: a payload of MAX_DEPTH levels inside the body's object.
MAX_BODY_DEPTH = MAX_DEPTH + 1
#: The most digits a numeric header or query parameter may have.
MAX_DIGITS = 18

_INTEGER = re.compile(rf"-?[0-9]{{1,{MAX_DIGITS}}}")
_DECIMAL = re.compile(rf"[0-9]{{1,{MAX_DIGITS}}}(\.[0-9]{{1,9}})?")
#: A JSON string (its escapes included), unrolled so that matching stays linear.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _BRACKETS)
_STEP = {ord("["): 1, ord("{"): 1, ord("]"): -1, ord("}"): -1}
#: A visible ASCII key (spaces inside allowed), as the Idempotency-Key header carries it.
_KEY = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?")
_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_MEDIA_TYPE = re.compile(
    rf"\s*({_TOKEN})/({_TOKEN})\s*((?:;\s*{_TOKEN}=(?:{_TOKEN}|\"[^\"\\]*\")\s*)*)"
)


def too_large(limit: int) -> Problem:
    """The refusal of a body over ``limit`` bytes."""
    return Problem(413, "body-too-large", f"the body is over {limit} bytes")


async def read_body(request: Request, limit: int = MAX_BODY) -> bytes:
    """The request's body, refused (413) past ``limit`` bytes without holding more.

    An honest Content-Length over the limit is refused before any byte is
    read; a body without one (chunked) is counted as it streams in.
    """
    declared = request.headers.get("content-length")
    if declared is not None:
        length = ascii_integer(declared, "Content-Length", header=True)
        if length < 0:
            raise Problem(400, "invalid-header", "Content-Length must be 0 or more")
        if length > limit:
            raise too_large(limit)
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise too_large(limit)
            chunks.append(chunk)
    except ClientDisconnect:
        raise Problem(400, "invalid-argument", "the client left before sending the body") from None
    return b"".join(chunks)


def json_depth(raw: bytes) -> int:
    """How deep the brackets of the JSON text ``raw`` nest, outside its strings.

    A linear scan, without recursion: strings are cut out first, then the
    running count of opening minus closing brackets is taken.
    """
    brackets = _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


def check_depth(raw: bytes, limit: int = MAX_BODY_DEPTH) -> None:
    """400 when the JSON text ``raw`` nests deeper than ``limit`` levels."""
    if json_depth(raw) > limit:
        raise Problem(400, "too-deep", f"the body nests deeper than {limit} levels")


def ascii_integer(raw: str, name: str, *, header: bool = False) -> int:
    """``raw`` as an integer written with ASCII digits (an optional minus), else 400."""
    if _INTEGER.fullmatch(raw) is None:
        code = "invalid-header" if header else "invalid-argument"
        raise Problem(400, code, f"{name} must be an integer of at most {MAX_DIGITS} digits")
    return int(raw)


def ascii_decimal(raw: str, name: str) -> float:
    """``raw`` as a non-negative decimal number written with ASCII digits, else 400."""
    if _DECIMAL.fullmatch(raw) is None:
        raise Problem(400, "invalid-argument", f"{name} must be a number such as 5 or 0.5")
    return float(raw)


def idempotency_key(raw: str | None) -> str | None:
    """The Idempotency-Key header's value, checked: visible ASCII, 1-MAX_KEY_LENGTH long."""
    if raw is None:
        return None
    if len(raw) > MAX_KEY_LENGTH or _KEY.fullmatch(raw) is None:
        raise Problem(
            400,
            "invalid-header",
            f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} visible ASCII characters",
        )
    return raw


def media_type(raw: str) -> tuple[str, dict[str, str]]:
    """The lowercased media type of a Content-Type and its parameters; 400 if malformed."""
    match = _MEDIA_TYPE.fullmatch(raw)
    if match is None:
        raise Problem(400, "invalid-header", "Content-Type is not a media type")
    params: dict[str, str] = {}
    for part in match.group(3).split(";"):
        name, _, value = part.strip().partition("=")
        if name:
            params[name.lower()] = value.strip('"')
    return f"{match.group(1)}/{match.group(2)}".lower(), params
