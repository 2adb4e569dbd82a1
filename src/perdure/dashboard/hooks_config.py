"""The sources of inbound webhooks: who may post to ``/api/v1/webhooks/{source}``, and how.

A webhooks config names each source with its ``kind`` (``github``,
``stripe``, ``hmac`` or ``token``), its ``secret`` (or ``secret_env``, the
environment variable holding it), the ``event`` name template, and for
Stripe the timestamp ``tolerance``. It is read from a TOML or JSON file
(``--webhooks-file`` or PERDURE_WEBHOOKS_FILE) or from JSON text in
PERDURE_WEBHOOKS: one table (object) per source, named by the source.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from perdure.errors import ConfigurationError

#: JSON text of the webhooks config (one object per source).
WEBHOOKS_ENV = "PERDURE_WEBHOOKS"
#: A TOML or JSON file of the webhooks config.
WEBHOOKS_FILE_ENV = "PERDURE_WEBHOOKS_FILE"
#: The kinds of source, by how a delivery proves where it comes from.
KINDS = ("github", "stripe", "hmac", "token")
#: The shortest secret accepted.
MIN_SECRET_LENGTH = 16
#: The event name template of each kind when the config gives none.
DEFAULT_EVENTS = {"github": "github.{X-GitHub-Event}", "stripe": "stripe.{type}"}
#: Stripe's default tolerance of a signature's timestamp, in seconds.
DEFAULT_TOLERANCE = 300.0

_SOURCE = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_HEADER = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")
_FIELDS = {"kind", "secret", "secret_env", "event", "tolerance", "header", "id_header"}


@dataclass(frozen=True)
class WebhookSource:
    """One source of webhooks.

    ``header``: the signature header of an ``hmac`` source (hex SHA-256
    HMAC of the raw body, ``sha256=`` prefix optional). ``id_header``: the
    header carrying a delivery's id (the emit key) for ``hmac`` and
    ``token`` sources; GitHub's is ``X-GitHub-Delivery``, Stripe's the
    event's ``id``.
    """

    name: str
    kind: str
    secret: str
    event: str
    tolerance: float = DEFAULT_TOLERANCE
    header: str = "X-Signature-256"
    id_header: str = "X-Webhook-Id"

    def __repr__(self) -> str:
        """Never show the secret."""
        return f"WebhookSource(name={self.name!r}, kind={self.kind!r}, event={self.event!r})"


def _source(name: object, entry: object, where: str) -> WebhookSource:
    if not isinstance(name, str) or _SOURCE.fullmatch(name) is None:
        raise ConfigurationError(
            f"{where}: a source name is 1-63 lowercase letters, digits, - or _, not {name!r}"
        )
    if not isinstance(entry, dict):
        raise ConfigurationError(f"{where}: source {name!r} must be a table of settings")
    unknown = sorted(set(entry) - _FIELDS)
    if unknown:
        raise ConfigurationError(f"{where}: source {name!r} has unknown settings {unknown}")
    kind = entry.get("kind")
    if kind not in KINDS:
        raise ConfigurationError(
            f"{where}: source {name!r} needs kind = one of {', '.join(KINDS)}, not {kind!r}"
        )
    secret = entry.get("secret")
    if "secret_env" in entry:
        secret = os.environ.get(str(entry["secret_env"]))
        if not secret:
            raise ConfigurationError(f"{where}: source {name!r}: ${entry['secret_env']} is not set")
    if not isinstance(secret, str) or len(secret) < MIN_SECRET_LENGTH:
        raise ConfigurationError(
            f"{where}: source {name!r} needs a secret of at least {MIN_SECRET_LENGTH} characters"
        )
    event = entry.get("event", DEFAULT_EVENTS.get(kind))
    if not isinstance(event, str) or not event:
        raise ConfigurationError(f"{where}: source {name!r} needs an event name template")
    tolerance = entry.get("tolerance", DEFAULT_TOLERANCE)
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or tolerance <= 0:
        raise ConfigurationError(f"{where}: source {name!r}: tolerance is seconds, above 0")
    headers = {}
    for setting in ("header", "id_header"):
        if setting in entry:
            value = entry[setting]
            if not isinstance(value, str) or _HEADER.fullmatch(value) is None:
                raise ConfigurationError(
                    f"{where}: source {name!r}: {setting} must be a header name"
                )
            headers[setting] = value
    return WebhookSource(name, kind, secret, event, float(tolerance), **headers)


def parse(data: object, where: str) -> tuple[WebhookSource, ...]:
    """The sources of a decoded config (a mapping of source names to settings)."""
    if not isinstance(data, dict):
        raise ConfigurationError(f"{where}: the webhooks config maps source names to settings")
    return tuple(_source(name, entry, where) for name, entry in data.items())


def read_file(path: str) -> tuple[WebhookSource, ...]:
    """The sources of a TOML file (JSON if its name ends with ``.json``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read the webhooks file {path}: {exc.strerror}") from None
    data: Any
    try:
        data = json.loads(text) if path.endswith(".json") else tomllib.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"the webhooks file {path} is not valid: {exc}") from None
    return parse(data, path)


def load(path: str | None = None) -> tuple[WebhookSource, ...]:
    """The configured sources: ``path`` (or $PERDURE_WEBHOOKS_FILE), then $PERDURE_WEBHOOKS."""
    sources: tuple[WebhookSource, ...] = ()
    path = path or os.environ.get(WEBHOOKS_FILE_ENV) or None
    if path is not None:
        sources += read_file(path)
    inline = os.environ.get(WEBHOOKS_ENV, "").strip()
    if inline:
        try:
            data = json.loads(inline)
        except ValueError as exc:
            raise ConfigurationError(f"${WEBHOOKS_ENV} is not JSON: {exc}") from None
        sources += parse(data, f"${WEBHOOKS_ENV}")
    names = [s.name for s in sources]
    if len(set(names)) != len(names):
        raise ConfigurationError("two webhook sources have the same name")
    return sources
