"""Checking that a webhook delivery comes from its source: HMAC signatures and tokens.

Every comparison is constant-time (``hmac.compare_digest``) and made over
the raw body as received, before it is decoded. A refusal is a
``Problem`` 401 whose detail says what was wrong, never the expected value.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Mapping

from perdure.dashboard.api.problems import Problem
from perdure.dashboard.hooks_config import WebhookSource

#: The most ``v1`` signatures of a Stripe-Signature header considered.
_MAX_STRIPE_SIGNATURES = 8


def _refuse(detail: str) -> Problem:
    return Problem(401, "bad-signature", detail)


def _hex_hmac(secret: str, message: bytes) -> str:
    return hmac.new(secret.encode("utf-8"), message, hashlib.sha256).hexdigest()


def _same(expected: str, given: str) -> bool:
    return hmac.compare_digest(expected.encode("ascii"), given.encode("ascii", "replace"))


def check_github(secret: str, body: bytes, header: str | None) -> None:
    """``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>``, else 401."""
    if not header:
        raise _refuse("X-Hub-Signature-256 is missing")
    scheme, _, given = header.strip().partition("=")
    if scheme != "sha256" or not _same(_hex_hmac(secret, body), given):
        raise _refuse("X-Hub-Signature-256 does not match the body")


def check_hmac(secret: str, body: bytes, header: str | None, name: str) -> None:
    """Header ``name``: the hex HMAC-SHA256 of the body (``sha256=`` optional), else 401."""
    if not header:
        raise _refuse(f"{name} is missing")
    given = header.strip().removeprefix("sha256=")
    if not _same(_hex_hmac(secret, body), given.lower()):
        raise _refuse(f"{name} does not match the body")


def check_stripe(
    secret: str, body: bytes, header: str | None, tolerance: float, now: float | None = None
) -> None:
    """``Stripe-Signature: t=<unix time>,v1=<hex>[,v1=...]`` over ``t.body``, else 401.

    The timestamp must be within ``tolerance`` seconds of ``now``; any one of
    the ``v1`` signatures may match (Stripe sends several while a secret is rolled).
    """
    if not header:
        raise _refuse("Stripe-Signature is missing")
    stamp: str | None = None
    signatures: list[str] = []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t" and stamp is None:
            stamp = value
        elif key == "v1" and len(signatures) < _MAX_STRIPE_SIGNATURES:
            signatures.append(value)
    if stamp is None or not stamp.isascii() or not stamp.isdigit() or len(stamp) > 12:
        raise _refuse("Stripe-Signature has no timestamp")
    if not signatures:
        raise _refuse("Stripe-Signature has no v1 signature")
    moment = time.time() if now is None else now
    if abs(moment - int(stamp)) > tolerance:
        raise _refuse(f"Stripe-Signature's timestamp is more than {tolerance:g} s away")
    expected = _hex_hmac(secret, stamp.encode("ascii") + b"." + body)
    matched = False
    for given in signatures:
        matched |= _same(expected, given)
    if not matched:
        raise _refuse("Stripe-Signature does not match the body")


def check_token(secret: str, header: str | None) -> None:
    """``Authorization: Bearer <the source's secret>``, else 401."""
    scheme, _, given = (header or "").strip().partition(" ")
    if scheme.lower() != "bearer" or not given:
        raise _refuse("Authorization: Bearer <token> is missing")
    if not hmac.compare_digest(
        hashlib.sha256(secret.encode()).digest(), hashlib.sha256(given.strip().encode()).digest()
    ):
        raise _refuse("the token is not this source's")


def verify(source: WebhookSource, body: bytes, headers: Mapping[str, str]) -> None:
    """Check a delivery to ``source`` by its kind; a ``Problem`` 401 when it does not prove it."""
    if source.kind == "github":
        check_github(source.secret, body, headers.get("x-hub-signature-256"))
    elif source.kind == "stripe":
        check_stripe(source.secret, body, headers.get("stripe-signature"), source.tolerance)
    elif source.kind == "hmac":
        check_hmac(source.secret, body, headers.get(source.header.lower()), source.header)
    else:
        check_token(source.secret, headers.get("authorization"))
