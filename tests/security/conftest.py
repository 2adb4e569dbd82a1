"""Fixtures of the SQL surface's tests (see sql_roles)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from sql_roles import SqlSetup
from sql_roles import make_setup as _make


@pytest.fixture
def sql_setup(pg_url: str, schema: str) -> Iterator[SqlSetup]:
    """A schema migrated by a non-superuser owner role, with workflow ``w`` registered."""
    yield from _make(pg_url, schema, superuser=False)


@pytest.fixture
def make_setup(pg_url: str, schema: str) -> Iterator[Callable[[bool], SqlSetup]]:
    """Make the setup migrated by an owner role (False) or by the superuser (True)."""
    made: list[Iterator[SqlSetup]] = []

    def make(superuser: bool) -> SqlSetup:
        gen = _make(pg_url, schema, superuser)
        made.append(gen)
        return next(gen)

    yield make
    for gen in made:
        next(gen, None)
