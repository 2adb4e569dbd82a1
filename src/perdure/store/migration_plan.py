"""What each pending migration locks, for how long, and whether live workers keep up.

``perdure migrate --plan`` reads it before anything is applied. Each migration
runs in one transaction, so every lock it takes is held until that
transaction commits: the expected hold is the migration's total. The estimate
comes from the rows the planner believes each table has (``reltuples``) and a
conservative rate; a catalog-only change is quoted as instant, but it still
waits behind every transaction that touches the table (set a
``lock_timeout`` on busy databases, as docs/deploying.md shows).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import psycopg
from psycopg import sql

from perdure.store import migrate, versions

#: Rows per second a rewrite, index build or bulk update is assumed to manage.
ROWS_PER_SECOND = 200_000.0

#: ALTER TABLE actions that change only the catalog (no rewrite, no scan).
_CATALOG_ONLY = [
    re.compile(r"ADD\s+COLUMN\s+\S+\s+\S+(\s+DEFAULT\s+('[^']*'|[\d.]+|NULL|TRUE|FALSE))?$"),
    re.compile(r"(DROP\s+COLUMN|ALTER\s+COLUMN\s+\S+\s+(SET|DROP)\s+DEFAULT)"),
    re.compile(r"ADD\s+CONSTRAINT\s+.*NOT\s+VALID"),
]
_DOLLAR = re.compile(r"\$[A-Za-z_0-9]*\$")
_TABLE = r'(?:ONLY\s+)?(?:IF\s+(?:NOT\s+)?EXISTS\s+)?"?([A-Za-z_][A-Za-z_0-9.]*)"?'


@dataclass(frozen=True)
class Lock:
    """One table lock a statement takes."""

    table: str
    mode: str
    #: What it blocks while held, in words.
    blocks: str
    #: Expected seconds of work under the lock (0: catalog only).
    seconds: float
    statement: str


@dataclass
class PlannedMigration:
    """One pending migration and its locks."""

    version: int
    name: str
    locks: list[Lock] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        """Expected time the migration's transaction holds its locks."""
        return sum(lock.seconds for lock in self.locks)


@dataclass(frozen=True)
class LiveWorker:
    """A running worker and whether its code runs on the target schema."""

    id: str
    host: str
    schema_version: int | None
    release: str | None
    compatible: bool | None


@dataclass
class Plan:
    """The pending migrations of one schema, and the live workers."""

    schema: str
    current: int
    target: int
    migrations: list[PlannedMigration]
    workers: list[LiveWorker]


def statements(text: str) -> list[str]:
    """The top-level statements of a migration (comments dropped, $$ bodies kept whole)."""
    out: list[str] = []
    current: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(text):
        if quote is None and text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        if quote is None and text[i] == "'":
            end = text.find("'", i + 1)
            end = len(text) if end < 0 else end + 1
            current.append(text[i:end])
            i = end
            continue
        match = _DOLLAR.match(text, i)
        if match:
            tag = match.group(0)
            quote = None if quote == tag else (tag if quote is None else quote)
            current.append(tag)
            i = match.end()
            continue
        if quote is None and text[i] == ";":
            out.append(" ".join("".join(current).split()))
            current = []
        else:
            current.append(text[i])
        i += 1
    tail = " ".join("".join(current).split())
    if tail:
        out.append(tail)
    return [s for s in out if s]


def locks_of(statement: str, rows: dict[str, float]) -> list[Lock]:
    """The table locks ``statement`` takes, with the work expected under each."""
    upper = statement.upper()
    short = statement if len(statement) <= 90 else statement[:87] + "..."

    def scan(table: str) -> float:
        return rows.get(table.split(".")[-1], 0.0) / ROWS_PER_SECOND

    found = re.match(r"CREATE\s+(?:UNIQUE\s+)?INDEX\s+(CONCURRENTLY\s+)?.*?\sON\s+" + _TABLE, upper)
    if found:
        table = found.group(2).lower()
        if found.group(1):
            return [Lock(table, "SHARE UPDATE EXCLUSIVE", "other DDL", scan(table), short)]
        return [Lock(table, "SHARE", "writes (reads go on)", scan(table), short)]
    found = re.match(r"ALTER\s+TABLE\s+" + _TABLE + r"\s+(.*)", upper)
    if found:
        table, action = found.group(1).lower(), found.group(2)
        actions = re.split(r",\s*(?=ADD|DROP|ALTER|SET|RENAME)", action)
        catalog_only = all(any(p.match(a.strip()) for p in _CATALOG_ONLY) for a in actions)
        seconds = 0.0 if catalog_only else scan(table)
        return [Lock(table, "ACCESS EXCLUSIVE", "reads and writes", seconds, short)]
    found = re.match(r"CREATE\s+(?:CONSTRAINT\s+)?TRIGGER\s+.*?\sON\s+" + _TABLE, upper)
    if found:
        table = found.group(1).lower()
        return [Lock(table, "SHARE ROW EXCLUSIVE", "writes", 0.0, short)]
    found = re.match(r"DROP\s+(TABLE|INDEX)\s+" + _TABLE, upper)
    if found:
        table = found.group(2).lower()
        return [Lock(table, "ACCESS EXCLUSIVE", "reads and writes", 0.0, short)]
    found = re.match(r"(?:UPDATE|DELETE\s+FROM|INSERT\s+INTO)\s+" + _TABLE, upper)
    if found:
        table = found.group(1).lower()
        return [Lock(table, "ROW EXCLUSIVE", "conflicting row writes", scan(table), short)]
    return []


def plan(conn: psycopg.Connection[Any], schema: str) -> Plan:
    """The plan for bringing ``schema`` to this code's version, read on ``conn``."""
    known = migrate.available()
    current = migrate.current_version(conn, schema)
    rows = _row_estimates(conn, schema)
    pending = []
    for migration in known:
        if migration.version <= current:
            continue
        planned = PlannedMigration(migration.version, migration.name)
        for stmt in statements(migration.sql):
            planned.locks.extend(locks_of(stmt, rows))
        pending.append(planned)
    target = max(current, migrate.latest(known))
    return Plan(schema, current, target, pending, _live_workers(conn, schema, target))


def _row_estimates(conn: psycopg.Connection[Any], schema: str) -> dict[str, float]:
    found = conn.execute(
        "SELECT c.relname, greatest(c.reltuples, 0) FROM pg_class c"
        " JOIN pg_namespace n ON n.oid = c.relnamespace"
        " WHERE n.nspname = %s AND c.relkind IN ('r', 'p')",
        (schema,),
    ).fetchall()
    return {str(name): float(count) for name, count in found}


def _live_workers(conn: psycopg.Connection[Any], schema: str, target: int) -> list[LiveWorker]:
    exists = conn.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (sql.Identifier(schema, "workers").as_string(conn),)
    ).fetchone()
    if not exists or not exists[0]:
        return []
    versioned = conn.execute(
        "SELECT count(*) FROM information_schema.columns"
        " WHERE table_schema = %s AND table_name = 'workers' AND column_name = 'schema_version'",
        (schema,),
    ).fetchone()
    if versioned and versioned[0]:
        template = sql.SQL(
            "SELECT id, host, schema_version, release FROM {}.workers"
            " WHERE status = 'running' ORDER BY id"
        )
    else:
        template = sql.SQL(
            "SELECT id, host, NULL, NULL FROM {}.workers WHERE status = 'running' ORDER BY id"
        )
    query = template.format(sql.Identifier(schema))
    live = []
    for worker_id, host, version, release in conn.execute(query).fetchall():
        compatible = None if version is None else versions.runs_on(int(version), target)
        live.append(LiveWorker(str(worker_id), str(host), version, release, compatible))
    return live
