"""Load the named queries from ``sql/queries/*.sql`` once.

A query starts with a header line ``-- name: <entity>_<verb>``, followed by
comment lines that describe it, then the statement up to the next header.
A fragment, a piece of SQL several queries share, starts with ``-- fragment:
<name>`` instead; a query names it as ``{<name>}`` and gets its text in that
place. Two more placeholders are filled in when a store is built: ``{schema}``
with the quoted schema name and ``{now}`` with the clock expression, so that
every time comparison goes through one clock a test can move.
"""

from __future__ import annotations

import re
import textwrap
from functools import cache
from importlib import resources

_HEADER = re.compile(r"^-- (name|fragment): ([a-z][a-z0-9_]*)\s*$", re.MULTILINE)
_PLACEHOLDER = re.compile(r"\{([a-z_]+)\}")
_RENDERED = {"schema", "now"}

# Every query compares times through this expression: the caller's clock when
# it passes one (a test clock), else the server's transaction time.
NOW_SQL = "coalesce(%(now)s::timestamptz, now())"


class QueryFileError(ValueError):
    """A query file is malformed: a duplicate name, an empty statement or an unknown fragment."""


def _blocks(text: str) -> dict[str, dict[str, str]]:
    """The text's queries and fragments: ``{"name": {...}, "fragment": {...}}``."""
    found: dict[str, dict[str, str]] = {"name": {}, "fragment": {}}
    headers = list(_HEADER.finditer(text))
    for index, match in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        body_lines = [
            line
            for line in text[match.end() : end].splitlines()
            if not line.lstrip().startswith("--")
        ]
        body = "\n".join(body_lines).strip().rstrip(";").strip()
        kind, name = match.group(1), match.group(2)
        if not body:
            raise QueryFileError(f"{kind} {name!r} has no statement")
        if name in found["name"] or name in found["fragment"]:
            raise QueryFileError(f"{kind} {name!r} is defined twice")
        found[kind][name] = body
    return found


def parse(text: str) -> dict[str, str]:
    """Split the text of one query file into ``{name: statement}`` (fragments left out).

    Whole-line comments after a header are dropped (they document the file,
    not the statement sent to the server); the text
    before the first header is the file's preamble and is ignored.
    """
    return _blocks(text)["name"]


def inline(queries: dict[str, str], fragments: dict[str, str]) -> dict[str, str]:
    """``queries`` with each ``{fragment}`` replaced by the fragment's text.

    The fragment's lines after its first are indented as the line that names
    it, so that the statement the server logs reads as written.
    """

    def place(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in _RENDERED:
            return match.group(0)
        if name not in fragments:
            raise QueryFileError(f"unknown fragment {{{name}}}")
        line_start = match.string.rfind("\n", 0, match.start()) + 1
        line = match.string[line_start : match.start()]
        indent = line[: len(line) - len(line.lstrip())]
        head, _, rest = fragments[name].partition("\n")
        return "\n".join([head, *(indent + row for row in textwrap.dedent(rest).splitlines())])

    return {name: _PLACEHOLDER.sub(place, body) for name, body in queries.items()}


@cache
def _files() -> dict[str, dict[str, str]]:
    """Every query and fragment shipped in the package, by kind, as written."""
    found: dict[str, dict[str, str]] = {"name": {}, "fragment": {}}
    folder = resources.files("perdure.store") / "sql" / "queries"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for kind, blocks in _blocks(entry.read_text(encoding="utf-8")).items():
            for name, body in blocks.items():
                if name in found[kind]:
                    raise QueryFileError(f"{kind} {name!r} is defined in two files")
                found[kind][name] = body
    return found


def fragments() -> dict[str, str]:
    """Every fragment shipped in the package."""
    return dict(_files()["fragment"])


@cache
def load_all() -> dict[str, str]:
    """Every named query shipped in the package, its fragments in place, unrendered."""
    return inline(_files()["name"], _files()["fragment"])


def render(schema_sql: str) -> dict[str, str]:
    """Every named query with ``{schema}`` and ``{now}`` filled in."""
    return {
        name: body.replace("{schema}", schema_sql).replace("{now}", NOW_SQL)
        for name, body in load_all().items()
    }
