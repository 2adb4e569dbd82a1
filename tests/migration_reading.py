"""The SQL functions the shipped migrations define, read from the files alone.

``Schema`` follows the migrations in order, statement by statement, as an
auditor reads them, with no database: each function's latest definition is
kept. A ``CREATE [OR REPLACE] FUNCTION`` sets every attribute afresh (a
replaced function loses a pin an earlier ``ALTER FUNCTION`` gave it); an
``ALTER FUNCTION ... SECURITY DEFINER`` or ``... SET search_path`` changes
one; ``DROP FUNCTION`` removes it. ``ALTER FUNCTION`` statements written as
the text of an ``EXECUTE`` in a ``DO`` block count too (with ``%I`` for the
schema), when they name the function; a loop over every function of the
schema does not (that is the migrator's blanket pin, not the function's own).

A function counts as pinned when its own CREATE sets a path ending in
pg_temp, or says ``SET search_path FROM CURRENT`` in a migration the migrator
runs with pg_temp last on the path (from ``PINNED_FROM`` on; before, it set
the schema alone, so pg_temp came first), or when a later ``ALTER FUNCTION``
sets a path ending in pg_temp. Used by tests/unit/test_definer_pins.py and
tests/security/test_definer_escalation.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from perdure.store.migrate import PINNED_FROM

FOLDER = resources.files("perdure.store") / "sql" / "migrations"
_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
_DOLLAR = re.compile(r"\$[A-Za-z_][A-Za-z_0-9]*\$|\$\$")
_NAME = r'((?:"?[A-Za-z_][A-Za-z_0-9]*"?\.)?"?[A-Za-z_%][A-Za-z_0-9]*"?)'
_CREATE = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+" + _NAME + r"\s*\(", re.I)
_ALTER = re.compile(r"ALTER\s+FUNCTION\s+" + _NAME + r"\s*(\()?", re.I)
_DROP = re.compile(r"DROP\s+FUNCTION\s+(?:IF\s+EXISTS\s+)?", re.I)
_PATH = re.compile(
    r"\bSET\s+search_path\s+(?:(FROM\s+CURRENT)|(?:=|TO)\s+"
    r"((?:(?:\"[^\"]*\"|'[^']*'|[%\w$]+)\s*,\s*)*(?:\"[^\"]*\"|'[^']*'|[%\w$]+)))",
    re.I,
)
_MODES = {"in", "out", "inout", "variadic"}
_TYPE_WORDS = {"double", "timestamp", "time", "character", "bit", "national", "interval"}
_ALIASES = {
    "int": "integer",
    "int4": "integer",
    "int8": "bigint",
    "int2": "smallint",
    "float8": "double precision",
    "float4": "real",
    "bool": "boolean",
    "timestamptz": "timestamp with time zone",
    "timestamp": "timestamp without time zone",
    "timetz": "time with time zone",
    "varchar": "character varying",
    "decimal": "numeric",
}


@dataclass
class Function:
    """A function's state after the statements read so far."""

    definer: bool
    pinned: bool
    #: The migration holding its latest CREATE.
    defined_in: str


def split(text: str) -> list[str]:
    """The statements of ``text``: comments dropped, quotes and $-bodies kept whole."""
    out: list[str] = []
    current: list[str] = []
    i = 0
    while i < len(text):
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i)
            i = len(text) if end < 0 else end + 2
            continue
        if text[i] == "'":
            end = i + 1
            while end < len(text):
                if text[end] == "'" and text.startswith("''", end):
                    end += 2
                    continue
                if text[end] == "'":
                    break
                end += 1
            current.append(text[i : end + 1])
            i = end + 1
            continue
        match = _DOLLAR.match(text, i)
        if match:
            close = text.find(match.group(0), match.end())
            end = len(text) if close < 0 else close + len(match.group(0))
            current.append(text[i:end])
            i = end
            continue
        if text[i] == ";":
            out.append("".join(current).strip())
            current = []
        else:
            current.append(text[i])
        i += 1
    out.append("".join(current).strip())
    return [s for s in out if s]


def _closing(text: str, start: int) -> int:
    """The index of the parenthesis closing the one before ``start``."""
    depth = 1
    i = start
    while i < len(text):
        if text[i] == "'":
            i = text.find("'", i + 1)
        elif text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise ValueError(f"unbalanced parentheses in {text[:80]!r}")


def _top_level(text: str) -> list[str]:
    """``text`` split at its top-level commas."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        if text[i] == "'":
            i = text.find("'", i + 1)
        elif text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
        elif text[i] == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _type(arg: str) -> str | None:
    """The type of one argument (None for an OUT argument, not in the signature)."""
    arg = re.split(r"\s+DEFAULT\s+|\s*=\s*", arg, maxsplit=1, flags=re.I)[0]
    words = arg.lower().split()
    if words[0] in _MODES:
        if words[0] == "out":
            return None
        words = words[1:]
    if len(words) > 1 and words[0] not in _TYPE_WORDS:
        words = words[1:]
    name = " ".join(words).replace('"', "")
    array = name.endswith("[]")
    name = name.removesuffix("[]").strip()
    name = _ALIASES.get(name, name)
    return name + ("[]" if array else "")


def signature(name: str, args: str) -> str:
    """``name(type, ...)``: the name unqualified, argument names dropped, types spelt out."""
    types = [t for t in (_type(a) for a in _top_level(args)) if t is not None]
    return f"{name.split('.')[-1].replace(chr(34), '').lower()}({', '.join(types)})"


def _attributes(text: str, version: int) -> tuple[bool, bool | None]:
    """Whether ``text`` (a CREATE's or ALTER's clauses, bodies removed) makes a
    definer, and whether it pins search_path with pg_temp last (None: no path).

    ``FROM CURRENT`` takes the migrator's path, which ends in pg_temp from
    migration ``PINNED_FROM`` on; migrations before it were applied with the
    schema alone on the path (pg_temp then searched first), and may already
    have been on users' databases.
    """
    definer = re.search(r"\bSECURITY\s+DEFINER\b", text, re.I) is not None
    match = _PATH.search(text)
    if match is None:
        return definer, None
    if match.group(1):
        return definer, version >= PINNED_FROM
    last = re.split(r"\s*,\s*", match.group(2))[-1].strip("'\" ").lower()
    return definer, last == "pg_temp"


def _without_bodies(text: str) -> str:
    return re.sub(r"\$([A-Za-z_0-9]*)\$.*?\$\1\$", " ", text, flags=re.S)


def _literal_runs(body: str) -> list[str]:
    """Each run of adjacent string literals in a DO body, joined: the text of a
    dynamic statement such as ``format('ALTER FUNCTION f(text) ' 'SET ...', ...)``."""
    runs = re.findall(r"(?:'(?:[^']|'')*'\s*)+", body)
    return [
        "".join(p.replace("''", "'") for p in re.findall(r"'((?:[^']|'')*)'", run)) for run in runs
    ]


def _version(migration: str) -> int:
    return int(migration[:4])


class Schema:
    """The functions the migrations define, followed statement by statement."""

    def __init__(self) -> None:
        self.functions: dict[str, Function] = {}

    def read(self, text: str, migration: str) -> None:
        """Follow the statements of one migration (``NNNN_name.sql``)."""
        for statement in split(text):
            self.apply(statement, migration)

    def _find(self, name: str, args: str | None) -> str | None:
        if args is not None:
            key = signature(name, args)
            return key if key in self.functions else None
        bare = name.split(".")[-1].replace('"', "").lower()
        found = [k for k in self.functions if k.startswith(bare + "(")]
        return found[0] if len(found) == 1 else None

    def apply(self, statement: str, migration: str) -> None:
        """Follow one statement (a DO block: the ALTER FUNCTIONs it holds)."""
        head = statement.lstrip()
        if match := _CREATE.match(head):
            close = _closing(head, match.end())
            key = signature(match.group(1), head[match.end() : close])
            definer, pinned = _attributes(_without_bodies(head[close + 1 :]), _version(migration))
            self.functions[key] = Function(definer, bool(pinned), migration)
        elif match := _ALTER.match(head):
            if "%" in match.group(1):
                return  # a loop over every function: the blanket pin, not this one's
            if match.group(2):
                close = _closing(head, match.end())
                key = self._find(match.group(1), head[match.end() : close])
                rest = head[close + 1 :]
            else:
                key = self._find(match.group(1), None)
                rest = head[match.end() :]
            if re.match(r"\s*(RENAME|SET\s+SCHEMA)\b", rest, re.I):
                raise AssertionError(f"{migration}: this test does not follow {head[:80]!r}")
            if key is None:
                raise AssertionError(f"{migration}: ALTER of an unknown function: {head[:80]!r}")
            function = self.functions[key]
            definer, pinned = _attributes(rest, _version(migration))
            if definer:
                function.definer = True
            if re.search(r"\bSECURITY\s+INVOKER\b", rest, re.I):
                function.definer = False
            if pinned is not None:
                function.pinned = pinned
            if re.search(r"\bRESET\s+(search_path|ALL)\b", rest, re.I):
                function.pinned = False
        elif match := _DROP.match(head):
            for one in _top_level(re.sub(r"\s+(CASCADE|RESTRICT)\s*$", "", head[match.end() :])):
                name, _, args = one.partition("(")
                self.functions.pop(signature(name.strip(), args.rstrip(") ")), None)
        elif re.match(r"DO\b", head, re.I):
            body = re.search(r"\$([A-Za-z_0-9]*)\$(.*)\$\1\$", head, re.S)
            if body:
                inner = split(body.group(2))
                for text in [*_literal_runs(" ; ".join(inner)), *inner]:
                    if _ALTER.match(text.lstrip()):
                        self.apply(text, migration)


def migrations() -> list[tuple[str, str]]:
    """The shipped migration files, in version order: (file name, text)."""
    found = [(e.name, e) for e in FOLDER.iterdir() if _FILE.match(e.name)]
    return [(name, e.read_text(encoding="utf-8")) for name, e in sorted(found)]


def unpinned(files: list[tuple[str, str]]) -> list[str]:
    """The definers of ``files`` left without a pinned search_path, each with its file."""
    schema = Schema()
    for name, text in files:
        schema.read(text, name)
    return [
        f"{key} (defined last in {f.defined_in})"
        for key, f in sorted(schema.functions.items())
        if f.definer and not f.pinned
    ]
