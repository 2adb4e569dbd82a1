"""How far behind its primary the database an App reads from is."""

from __future__ import annotations

from typing import TYPE_CHECKING

from perdure.store import replica

if TYPE_CHECKING:
    from perdure.api.app import App


def replication_lag(app: App) -> float | None:
    """Seconds ``app``'s database lags behind its primary; None when it is not a standby.

    DatabaseUnavailable when it cannot be asked.
    """
    return replica.replication_lag(app.url)
