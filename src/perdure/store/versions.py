"""Which schema this code was written for, and which newer schema it still runs on.

The rolling-deploy rule: the code of a release runs on its own schema version
and on the next one (``SCHEMA_AHEAD``). A migration keeps what the previous
release reads and writes for one release: it adds tables, columns (nullable
or with a constant default), indexes and functions' new overloads; it drops or
renames only what the previous release no longer uses. So
``perdure migrate`` can run while the previous release's workers serve, and
those workers can restart on the migrated schema until they are replaced.
"""

from __future__ import annotations

from functools import cache
from importlib import metadata

from perdure.store import migrate
from perdure.store.migrate import SCHEMA_AHEAD


@cache
def code_schema_version() -> int:
    """The newest migration this code ships: the schema version it was written for."""
    return migrate.latest(migrate.available())


def release() -> str:
    """This code's perdure release (the installed distribution's version)."""
    try:
        return metadata.version("perdure")
    except metadata.PackageNotFoundError:
        return "unknown"


def runs_on(code_version: int, schema_version: int) -> bool:
    """Whether code written for ``code_version`` runs on a schema at ``schema_version``."""
    return code_version <= schema_version <= code_version + SCHEMA_AHEAD
