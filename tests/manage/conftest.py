"""A ledger for the management tests: one row per step execution, written outside perdure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import psycopg
import pytest


class Ledger:
    """Counts how often each step really executed, per run: a side effect perdure cannot undo."""

    def __init__(self, db: psycopg.Connection[Any], url: str, schema: str) -> None:
        self.db, self.url, self.schema = db, url, schema
        db.execute("CREATE TABLE ledger (run_id text, step text)")

    def note(self, run_id: str, step: str) -> None:
        """Record one execution of ``step`` in run ``run_id`` (its own connection, committed)."""
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute(
                f"INSERT INTO {self.schema}.ledger (run_id, step) VALUES (%s, %s)", (run_id, step)
            )

    def counts(self, run_id: str) -> Counter[str]:
        """How many times each step executed in run ``run_id``."""
        rows = self.db.execute("SELECT step FROM ledger WHERE run_id = %s", (run_id,)).fetchall()
        return Counter(r[0] for r in rows)


@pytest.fixture
def ledger(db: psycopg.Connection[Any], pg_url: str, schema: str) -> Ledger:
    """A fresh ledger table in this test's schema."""
    return Ledger(db, pg_url, schema)


@pytest.fixture
def note(ledger: Ledger) -> Callable[[str, str], None]:
    """``note(run_id, step)``: record a step execution in the ledger."""
    return ledger.note
