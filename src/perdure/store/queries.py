"""Load the named queries from ``sql/queries/*.sql`` once.

A query starts with a header line ``-- name: <entity>_<verb>``, followed by
comment lines that describe it, then the statement up to the next header. Two
placeholders are filled in when a store is built: ``{schema}`` with the quoted
schema name and ``{now}`` with the clock expression, so that every time
comparison goes through one clock a test can move.
"""

from __future__ import annotations

import re
from functools import cache
from importlib import resources

_HEADER = re.compile(r"^-- name: ([a-z][a-z0-9_]*)\s*$", re.MULTILINE)

# Every query compares times through this expression: the caller's clock when
# it passes one (a test clock), else the server's transaction time.
NOW_SQL = "coalesce(%(now)s::timestamptz, now())"


class QueryFileError(ValueError):
    """A query file is malformed: a duplicate name or an empty statement."""


def parse(text: str) -> dict[str, str]:
    """Split the text of one query file into ``{name: statement}``.

    Whole-line comments after a header are dropped (they document the file,
    not the statement sent to the server); the text
    before the first header is the file's preamble and is ignored.
    """
    found: dict[str, str] = {}
    headers = list(_HEADER.finditer(text))
    for index, match in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        body_lines = [
            line
            for line in text[match.end() : end].splitlines()
            if not line.lstrip().startswith("--")
        ]
        body = "\n".join(body_lines).strip().rstrip(";").strip()
        name = match.group(1)
        if not body:
            raise QueryFileError(f"query {name!r} has no statement")
        if name in found:
            raise QueryFileError(f"query {name!r} is defined twice")
        found[name] = body
    return found


@cache
def load_all() -> dict[str, str]:
    """Every named query shipped in the package, unrendered."""
    queries: dict[str, str] = {}
    folder = resources.files("perdure.store") / "sql" / "queries"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".sql"):
            continue
        for name, body in parse(entry.read_text(encoding="utf-8")).items():
            if name in queries:
                raise QueryFileError(f"query {name!r} is defined in two files")
            queries[name] = body
    return queries


def render(schema_sql: str) -> dict[str, str]:
    """Every named query with ``{schema}`` and ``{now}`` filled in."""
    return {
        name: body.replace("{schema}", schema_sql).replace("{now}", NOW_SQL)
        for name, body in load_all().items()
    }
