"""Reading from a hot standby: how far behind the primary it is.

The dashboard and the read-only CLI commands may read from a standby
(``--read-url``); what they show is then as old as the standby's replay lag.
"""

from __future__ import annotations

import psycopg

from perdure.errors import DatabaseUnavailable

#: The replay lag in seconds on a standby; NULL on a primary. A standby whose
#: primary has been idle replays nothing new, so the lag is 0 when it has
#: replayed everything it received.
LAG_QUERY = """
SELECT CASE
    WHEN NOT pg_is_in_recovery() THEN NULL
    WHEN pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0.0
    ELSE extract(epoch FROM now() - pg_last_xact_replay_timestamp())::float8
END
"""


def replication_lag(url: str) -> float | None:
    """Seconds the server at ``url`` lags behind its primary; None if it is not a standby.

    DatabaseUnavailable when it cannot be asked.
    """
    try:
        with psycopg.connect(url, autocommit=True, connect_timeout=5) as conn:
            row = conn.execute(LAG_QUERY).fetchone()
    except psycopg.Error as exc:
        raise DatabaseUnavailable(f"cannot read the replication lag: {exc}") from exc
    return None if row is None or row[0] is None else float(row[0])
