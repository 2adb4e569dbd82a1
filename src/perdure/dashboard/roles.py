"""Who may do what on the dashboard and the HTTP API: roles, named tokens, proxy users.

Four roles, each a set of permissions (docs/security.md has the matrix):

- ``viewer``: reads every page and API read, payloads included;
- ``viewer-no-payloads``: the same reads with every input, output, step
  result, signal, event and stream value and error detail hidden;
- ``operator``: a viewer who also starts, cancels, retries, forks, signals,
  pauses and resumes runs;
- ``admin``: everything, and the audit record.

People are known by a named token (``name:role:token`` lines, from
``PERDURE_TOKENS`` or a tokens file; only the tokens' SHA-256 digests are
kept, compared in constant time), or by the user header of an
authenticating proxy (oauth2-proxy and the like) when the request comes
from a configured proxy address (``ProxyAuth``).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from perdure.errors import ConfigurationError

#: The shortest token accepted: long enough not to be guessed by hand.
MIN_TOKEN_LENGTH = 12

#: What each role may do: read, see payloads, act on runs, read the audit record.
PERMISSIONS: dict[str, frozenset[str]] = {
    "viewer-no-payloads": frozenset({"read"}),
    "viewer": frozenset({"read", "payloads"}),
    "operator": frozenset({"read", "payloads", "act"}),
    "admin": frozenset({"read", "payloads", "act", "audit"}),
}
ROLES = tuple(PERMISSIONS)
#: A rank per role, to pick the highest of a proxy user's groups.
_RANK = {role: rank for rank, role in enumerate(ROLES)}


def check_role(role: object, what: str = "role") -> str:
    """``role`` if it is one of ``ROLES``, else ConfigurationError."""
    if not isinstance(role, str) or role not in PERMISSIONS:
        raise ConfigurationError(f"{what} must be one of {', '.join(ROLES)}, not {role!r}")
    return role


@dataclass(frozen=True)
class Principal:
    """Who sent a request: a name, a role, and how they were known.

    ``via`` is ``token`` (a named token), ``proxy`` (an authenticating
    proxy's user header) or ``open`` (a dashboard without authentication,
    served on loopback only: whoever can reach it is an admin).
    """

    name: str
    role: str
    via: str

    def can(self, permission: str) -> bool:
        """Whether the role holds ``permission`` (read, payloads, act, audit)."""
        return permission in PERMISSIONS[self.role]


#: Who uses a dashboard that asks for nothing (loopback only).
OPEN = Principal("local", "admin", "open")


def digest(token: str) -> bytes:
    """The SHA-256 digest of ``token``: what is kept in memory and compared."""
    return hashlib.sha256(token.encode()).digest()


@dataclass(frozen=True)
class NamedToken:
    """One accepted token: its holder's name, role, and the token's digest."""

    name: str
    role: str
    digest: bytes = field(repr=False)

    @classmethod
    def of(cls, name: str, role: str, token: str) -> NamedToken:
        """Check the three parts and keep the token's digest only."""
        if not name or len(name) > 100 or not name.isprintable() or ":" in name:
            raise ConfigurationError(
                f"a token's name must be 1-100 printable characters without ':', not {name!r}"
            )
        check_role(role, f"the role of token {name!r}")
        if len(token) < MIN_TOKEN_LENGTH or not token.isprintable() or token != token.strip():
            raise ConfigurationError(
                f"token {name!r} must be at least {MIN_TOKEN_LENGTH} printable characters "
                "without surrounding spaces"
            )
        return cls(name, role, digest(token))


def parse_tokens(text: str, where: str) -> tuple[NamedToken, ...]:
    """``name:role:token`` entries, one a line or separated by commas; ``#`` starts a comment.

    The token is everything after the second colon. ``where`` names the
    source in error messages, which never repeat a token.
    """
    found: list[NamedToken] = []
    for number, line in enumerate(text.replace(",", "\n").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        parts = line.split(":", 2)
        if len(parts) != 3:
            raise ConfigurationError(f"{where}, entry {number}: write it as name:role:token")
        found.append(NamedToken.of(parts[0].strip(), parts[1].strip(), parts[2].strip()))
    names = [t.name for t in found]
    for name in names:
        if names.count(name) > 1:
            raise ConfigurationError(f"{where}: token name {name!r} is given twice")
    digests = [t.digest for t in found]
    if len(set(digests)) != len(digests):
        raise ConfigurationError(f"{where}: the same token is given twice")
    return tuple(found)


def read_tokens_file(path: str | Path) -> tuple[NamedToken, ...]:
    """The tokens of a file of ``name:role:token`` lines (see ``parse_tokens``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"cannot read the tokens file {path}: {exc.strerror}") from None
    return parse_tokens(text, f"tokens file {path}")


def match_token(tokens: Iterable[NamedToken], candidate: str | None) -> NamedToken | None:
    """The token ``candidate`` is, comparing its digest with every one in constant time."""
    if not candidate:
        return None
    wanted = digest(candidate)
    found: NamedToken | None = None
    for token in tokens:
        # No early exit: the time taken does not tell which entry matched.
        if hmac.compare_digest(wanted, token.digest):
            found = token
    return found


def parse_networks(
    values: Iterable[str],
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    """Addresses or CIDR ranges (``10.0.0.0/8``, ``::1``), checked."""
    networks = []
    for value in values:
        value = value.strip()
        if not value:
            continue
        try:
            networks.append(ipaddress.ip_network(value, strict=False))
        except ValueError:
            raise ConfigurationError(
                f"a trusted proxy must be an address or a CIDR range, not {value!r}"
            ) from None
    return tuple(networks)


def parse_role_map(values: Iterable[str]) -> dict[str, str]:
    """``user=role`` or ``group:name=role`` entries, checked."""
    mapping: dict[str, str] = {}
    for value in values:
        value = value.strip()
        if not value:
            continue
        who, sep, role = value.rpartition("=")
        if not sep or not who.strip():
            raise ConfigurationError(
                f"a proxy role entry is user=role or group:name=role, not {value!r}"
            )
        mapping[who.strip()] = check_role(role.strip(), f"the role of {who.strip()!r}")
    return mapping


@dataclass(frozen=True)
class ProxyAuth:
    """Trust an authenticating proxy's user header, from its addresses only.

    ``networks``: the proxy's addresses (a request from any other address is
    not believed: its headers are ignored). ``user_header``: where the proxy
    puts the signed-in user (oauth2-proxy: ``X-Forwarded-User`` or
    ``X-Forwarded-Email``); no other header names a user. ``groups_header``:
    where it lists the user's groups, comma-separated (None: not read).
    ``roles``: ``user`` or ``group:name`` to role; a user's own entry wins,
    else their highest group's, else ``default_role`` (None: a user mapped
    to nothing is refused).
    """

    networks: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]
    user_header: str = "X-Forwarded-User"
    groups_header: str | None = None
    roles: Mapping[str, str] = field(default_factory=dict)
    default_role: str | None = "viewer"

    def __post_init__(self) -> None:
        if not self.networks:
            raise ConfigurationError("proxy authentication needs at least one trusted address")
        for header in (self.user_header, self.groups_header):
            if header is not None and (not header or not header.replace("-", "").isalnum()):
                raise ConfigurationError(f"invalid header name {header!r}")
        if self.default_role is not None:
            check_role(self.default_role, "the proxy's default role")
        for who, role in self.roles.items():
            check_role(role, f"the role of {who!r}")

    def trusts(self, address: str | None) -> bool:
        """Whether ``address`` (the TCP peer) is one of the proxy's."""
        if not address:
            return False
        try:
            ip = ipaddress.ip_address(address.strip("[]"))
        except ValueError:
            return False
        return any(ip in network for network in self.networks)

    def role_of(self, user: str, groups: Iterable[str]) -> str | None:
        """The role of proxy user ``user`` in ``groups`` (None: refused)."""
        if user in self.roles:
            return self.roles[user]
        found = [self.roles[f"group:{g}"] for g in groups if f"group:{g}" in self.roles]
        if found:
            return max(found, key=_RANK.__getitem__)
        return self.default_role

    def principal(self, address: str | None, headers: Mapping[str, str]) -> Principal | None:
        """The user the proxy vouches for, when ``address`` is trusted and a role maps."""
        if not self.trusts(address):
            return None
        user = (headers.get(self.user_header.lower()) or "").strip()
        if not user or len(user) > 200 or not user.isprintable():
            return None
        groups: list[str] = []
        if self.groups_header is not None:
            raw = headers.get(self.groups_header.lower()) or ""
            groups = [g.strip() for g in raw.split(",") if g.strip()]
        role = self.role_of(user, groups)
        return None if role is None else Principal(user, role, "proxy")
