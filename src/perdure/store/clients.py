"""The SQL functions a client role may execute, and the grant that lets it.

A *client* (a web app, or code in another language) gets USAGE on the schema
and EXECUTE on the public SQL functions only, which run as the schema's owner
and check every argument (docs/security.md, docs/any-language.md). A migration
that adds one extends every client role granted before it (``extend_clients``),
so an upgrade does not leave a client without what it already may do.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg
from psycopg import sql

#: The SQL functions a client role may execute (migrations 0011, 0017, 0020, 0024 and 0026):
#: the documented entry points of docs/any-language.md, by signature.
PUBLIC_FUNCTIONS = (
    "start_run(text, jsonb, text, integer, interval, integer, jsonb, text, text, interval)",
    "run_status(text)",
    "cancel_run(text, text)",
    "pause_run(text)",
    "resume_run(text)",
    "get_event(text, text)",
    "read_stream(text, text, integer, integer)",
    "send_signal(text, text, jsonb, text)",
    "emit_event(text, jsonb, text)",
    "emit_events(jsonb)",
    "send_update(text, text, jsonb, text)",
    "update_reply(text, text, double precision)",
)


def client_statements(
    schema: str, role: str, functions: Sequence[str] = PUBLIC_FUNCTIONS
) -> list[sql.Composed]:
    """The statements that let ``role`` call the public SQL functions of ``schema``
    (``functions``: all of them unless given), only."""
    s, r = sql.Identifier(schema), sql.Identifier(role)
    statements = [sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(s, r)]
    for signature in functions:
        name, _, args = signature.partition("(")
        statements.append(
            sql.SQL("GRANT EXECUTE ON FUNCTION {}.{}({} TO {}").format(
                s, sql.Identifier(name), sql.SQL(args), r
            )
        )
    return statements


def extend_clients(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> list[str]:
    """Give each client role of ``schema`` the public functions added since its grant.

    A client role (``client_statements``) holds EXECUTE on the public functions
    that existed when it was granted; a migration that adds one (``emit_events``,
    say) would leave it out until its grant is run again. Run by the migration
    that adds them, as the schema's owner: every role granted EXECUTE on
    ``run_status`` (a client's, or a worker's: it has them all already) is
    granted the whole list again, which is a no-op for what it holds. The roles
    so extended, by name.
    """
    probe = f"{sql.Identifier(schema).as_string(conn)}.run_status(text)"
    rows = conn.execute(
        "SELECT DISTINCT r.rolname FROM pg_proc p CROSS JOIN LATERAL aclexplode(p.proacl) a "
        "JOIN pg_roles r ON r.oid = a.grantee "
        "WHERE p.oid = to_regprocedure(%s) AND a.privilege_type = 'EXECUTE' "
        "AND a.grantee <> p.proowner ORDER BY 1",
        (probe,),
    ).fetchall()
    roles = [str(row[0]) for row in rows]
    if not roles:
        return roles
    present = [
        signature
        for signature in PUBLIC_FUNCTIONS
        if conn.execute(
            "SELECT to_regprocedure(%s)", (f"{sql.Identifier(schema).as_string(conn)}.{signature}",)
        ).fetchone()
        != (None,)
    ]
    for role in roles:
        for stmt in client_statements(schema, role, present):
            conn.execute(stmt)
    return roles
