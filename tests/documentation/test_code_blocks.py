"""Every code block of README.md and docs/ is run, or checked, or says why not.

- **python**: executed, the blocks of one page in order in one namespace, with
  an ``app`` (a perdure App on a schema of its own in the test database) and
  the imports a page takes for granted (``perdure``, ``BaseModel``,
  ``dataclass``, ``datetime`` ...). Names a block uses but neither defines nor
  imports are your own code the page leaves out (``charge``, ``resize``): each
  is bound to a placeholder function that returns None. ``run.result()``
  first runs the page's due work in-process (``perdure.testing.drain``),
  standing in for the worker the page assumes is running.
- **bash**: every ``perdure ...`` command is parsed by perdure's own click
  command line (the command exists, every option exists and takes its
  value), and the read-only ones (``runs list``, ``queues list`` ...) run
  against the page's schema. Other shell lines (pip, make, pytest) are
  CI's own commands and are counted as not run.
- **sql**: executed on the page's schema (``perdure.`` names the page's
  schema) in a transaction that is rolled back.
- other languages (text output, mermaid, promql, json): not code, counted.

A block preceded by ``<!-- not-run: reason -->`` is not executed (Python ones
are still compiled); ``<!-- run-by: where -->`` says which other test runs
it. See tests/documentation/blocks.py for the markers.
"""

from __future__ import annotations

import asyncio
import collections
import re
import shlex
import sys
import types
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import click
import psycopg
import pytest
from click.testing import CliRunner
from pydantic import BaseModel, Field

import perdure
from perdure import testing
from perdure.cli.main import cli
from perdure.store import migrate as migrations

from .blocks import ROOT, Block, blocks, free_names, pages

#: What the blocks of every page may use without importing it.
PRELUDE: dict[str, Any] = {
    "perdure": perdure,
    "testing": testing,
    "BaseModel": BaseModel,
    "Field": Field,
    "dataclass": dataclass,
    "datetime": datetime,
    "timedelta": timedelta,
    "timezone": timezone,
    "UTC": UTC,
    "Any": Any,
    "asyncio": asyncio,
}
#: perdure commands that only read, run for real against the page's schema.
READ_ONLY = {
    ("runs", "list"),
    ("queues", "list"),
    ("workflows", "list"),
    ("schedules", "list"),
    ("audit", "list"),
}
#: How a page writes "an id goes here" in SQL, and the value that stands in for it.
SQL_ELLIPSIS = ("'...'", "'00000000-0000-0000-0000-000000000000'")
#: How many blocks each way, over the pages this session collected.
COUNTS: collections.Counter[str] = collections.Counter()
NOT_RUN: list[str] = []

PAGES = [p for p in pages() if blocks(p)]


def placeholder(*args: Any, **kwargs: Any) -> None:
    """Your own code, which the page leaves out."""


@pytest.fixture
def page_app(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[perdure.App, str]]:
    """An App on a fresh schema, for one page's blocks; the schema is dropped after.

    ``perdure.App()`` in a block finds the same database and schema through
    the environment, as the page's reader's would.
    """
    schema = f"docs_{uuid.uuid4().hex[:10]}"
    monkeypatch.setenv("PERDURE_DATABASE_URL", pg_url)
    monkeypatch.setenv("PERDURE_SCHEMA", schema)
    app = perdure.App(pg_url, schema=schema)
    app.ensure_schema()
    try:
        yield app, schema
    finally:
        app.close()
        with psycopg.connect(pg_url, autocommit=True) as conn:
            migrations.drop_schema(conn, schema)


@pytest.fixture
def drained_results(monkeypatch: pytest.MonkeyPatch) -> None:
    """``run.result()`` runs the due work in-process first (the page assumes a worker)."""
    original = perdure.RunHandle.result

    def result(self: perdure.RunHandle, timeout: float | None = None) -> Any:
        testing.drain(self.app)
        return original(self, timeout=5 if timeout is None else timeout)

    monkeypatch.setattr(perdure.RunHandle, "result", result)


@pytest.mark.usefixtures("drained_results")
@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_page_blocks(page: Path, page_app: tuple[perdure.App, str], pg_url: str) -> None:
    app, schema = page_app
    # A module of its own, so that dataclasses and Pydantic models defined by
    # a block resolve their annotations as they would in the reader's module.
    module = types.ModuleType(f"docs_page_{schema}")
    module.__dict__.update({**PRELUDE, "app": app})
    sys.modules[module.__name__] = module
    failures: list[str] = []
    try:
        for block in blocks(page):
            try:
                _check(block, module.__dict__, app, schema, pg_url)
            except Exception as exc:
                failures.append(f"{block.where} ({block.lang}): {type(exc).__name__}: {exc}")
    finally:
        del sys.modules[module.__name__]
    assert not failures, "\n".join(failures)


def _check(block: Block, ns: dict[str, Any], app: perdure.App, schema: str, url: str) -> None:
    if block.lang == "python":
        code = compile(block.code, block.where, "exec", flags=_AWAIT)
        if block.included:
            COUNTS["python: file included, run by its own test"] += 1
        elif block.run_by:
            COUNTS["python: run by another test"] += 1
        elif block.not_run:
            COUNTS["python: compiled, marked not-run"] += 1
            NOT_RUN.append(f"{block.where}: {block.not_run}")
        else:
            for setup in block.setup:
                exec(compile(setup, f"{block.where} (setup)", "exec"), ns)
            for name in free_names(block.code, set(ns)):
                ns[name] = placeholder
            outcome = eval(code, ns)
            if asyncio.iscoroutine(outcome):
                asyncio.run(outcome)
            COUNTS["python: executed"] += 1
    elif block.lang in ("bash", "sh", "shell", "console"):
        _shell(block, schema, url)
    elif block.lang == "sql":
        if block.run_by:
            COUNTS["sql: run by another test"] += 1
        elif block.not_run:
            COUNTS["sql: marked not-run"] += 1
            NOT_RUN.append(f"{block.where}: {block.not_run}")
        else:
            with psycopg.connect(url) as conn:
                conn.execute(f"SET search_path TO {schema}")
                for setup in block.setup:
                    conn.execute(setup.replace("perdure.", f"{schema}."))
                sql = block.code.replace('"perdure".', f"{schema}.").replace(
                    "perdure.", f"{schema}."
                )
                sql = sql.replace(*SQL_ELLIPSIS)
                conn.execute(sql.encode())
                conn.rollback()
            COUNTS["sql: executed"] += 1
    else:
        COUNTS[f"not code ({block.lang or 'plain'})"] += 1


_AWAIT = 0x2000  # ast.PyCF_ALLOW_TOP_LEVEL_AWAIT


def _shell(block: Block, schema: str, url: str) -> None:
    """Check every perdure command of a shell block; run the read-only ones."""
    if block.not_run or block.run_by:
        kind = "marked not-run" if block.not_run else "run by another test"
        COUNTS[f"bash: {kind}"] += 1
        if block.not_run:
            NOT_RUN.append(f"{block.where}: {block.not_run}")
        return
    for line in _commands(block.code):
        # `[--key K]` is an optional part (checked as if given), `<...>` a value to fill in.
        fill_in = re.search(r"<[^>]*>", line) is not None
        line = re.sub(r"\[(-[^\]]*)\]", r"\1", re.sub(r"<[^>]*>", "VALUE", line))
        words = shlex.split(line, comments=True)
        while words and "=" in words[0] and not words[0].startswith("-"):
            words.pop(0)  # VAR=value before the command
        if not words:
            continue
        program = words[0].rsplit("/", 1)[-1]
        if program != "perdure":
            COUNTS["shell line: not perdure, not run (install, make, pytest ...)"] += 1
            continue
        try:
            path = _parse(words[1:], block)
        except click.BadParameter as exc:
            if "does not exist" not in str(exc):
                raise
            # A file the page's reader makes first (an export to check, say).
            COUNTS["perdure command: parsed by the CLI (reads a file made before)"] += 1
            continue
        if path in READ_ONLY and not fill_in:
            args = ["--database-url", url, "--schema", schema, *words[1:]]
            done = CliRunner().invoke(cli, args, catch_exceptions=False)
            assert done.exit_code == 0, f"{line!r} exited {done.exit_code}: {done.output}"
            COUNTS["perdure command: run"] += 1
        else:
            COUNTS["perdure command: parsed by the CLI (acts on a named run, app or server)"] += 1


def _commands(code: str) -> Iterator[str]:
    """The commands of a shell block: continuation lines joined, `a / b` alternatives split."""
    joined = code.replace("\\\n", " ")
    for line in joined.splitlines():
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:]
        for part in line.split(" && "):
            yield from (p.strip() for p in part.split("  /  ") if p.strip())


def _parse(args: list[str], block: Block) -> tuple[str, ...]:
    """Parse ``perdure args`` with the real click commands, without running them."""
    command: click.Command = cli
    ctx = command.make_context("perdure", list(args), resilient_parsing=False)
    path: list[str] = []
    while isinstance(command, click.Group):
        rest = [*ctx._protected_args, *ctx.args]
        if not rest:
            break
        name, sub, rest = command.resolve_command(ctx, rest)
        assert sub is not None and name is not None, f"{block.where}: no command in {args}"
        path.append(name)
        command = sub
        ctx = command.make_context(name, rest, parent=ctx, resilient_parsing=False)
    return tuple(path)


def pytest_terminal_summary_lines() -> list[str]:
    """The counts, as tests/documentation/conftest.py prints them at the end of the run."""
    lines = [f"  {count:4d}  {kind}" for kind, count in sorted(COUNTS.items())]
    lines += [f"  not-run: {reason}" for reason in NOT_RUN]
    return lines
