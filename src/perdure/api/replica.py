"""How far behind its primary the database an App reads from is."""

from __future__ import annotations

from typing import Protocol

from perdure.store import replica


class Located(Protocol):
    """Anything with a database URL (an App)."""

    @property
    def url(self) -> str:
        """The database URL."""
        ...


def replication_lag(app: Located) -> float | None:
    """Seconds ``app``'s database lags behind its primary; None when it is not a standby.

    DatabaseUnavailable when it cannot be asked.
    """
    return replica.replication_lag(app.url)
