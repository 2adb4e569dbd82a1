"""The statements of ``perdure demo``: its tables and evidence rows, ``sql/queries/demos.sql``."""

from __future__ import annotations

from perdure.store.statement import Namespace, Row, Statement, all_rows, count


def _nothing(found: list[Row]) -> None:
    return None


class DemoStatements(Namespace):
    """The statements of ``perdure demo``: ``statements.demos``."""

    #: The demo's tables that hold its data, and the statement saying whether each has rows.
    _ANY = {"demo_ledger": "demo_ledger_any", "demo_orders": "demo_orders_any"}

    #: The queries shown to the user to paste into psql, in order, with a note each.
    _LOOKS = (
        ("demo_look_statuses", ""),
        ("demo_look_events", ""),
        ("demo_look_reruns", "the steps in flight when the worker died"),
        ("demo_look_payments", ""),
        ("demo_look_duplicates", "empty: exactly once"),
    )

    def create_tables(self) -> list[Statement[None]]:
        """Create the demo's ledger, orders and payments tables if missing."""
        names = ("demo_create_ledger", "demo_create_orders", "demo_create_payments")
        return [self._build(name, _nothing) for name in names]

    def tables(self) -> Statement[list[str]]:
        """The demo's data tables (ledger, orders) that exist in the schema."""
        return self._build(
            "demo_tables",
            lambda found: [str(row["name"]) for row in found],
            schema_name=self._build.schema,
        )

    def has_rows(self, table: str) -> Statement[bool]:
        """Whether the demo's data table ``table`` (from ``tables``) holds a row."""
        return self._build(self._ANY[table], lambda found: bool(found and found[0]["found"]))

    def record_step(self, run_id: str, step: str, pid: int) -> Statement[None]:
        """The ledger row of one execution of ``step`` by process ``pid``."""
        return self._build("demo_record_step", _nothing, run_id=run_id, step=step, pid=pid)

    def payment_timeouts(self, run_id: str) -> Statement[int]:
        """How many times the gateway timed out for ``run_id`` so far."""
        return self._build("demo_payment_timeouts", count("timeouts"), run_id=run_id)

    def record_payment(self, run_id: str, outcome: str, pid: int) -> Statement[None]:
        """One attempt at the gateway (``timeout`` or ``charged``)."""
        return self._build("demo_record_payment", _nothing, run_id=run_id, outcome=outcome, pid=pid)

    def record_order(
        self, order_id: int, run_id: str, amount_cents: int, charge_id: str
    ) -> Statement[None]:
        """The order row of a checkout."""
        return self._build(
            "demo_record_order",
            _nothing,
            order_id=order_id,
            run_id=run_id,
            amount_cents=amount_cents,
            charge_id=charge_id,
        )

    def ledger_rows(self) -> Statement[list[Row]]:
        """Every ledger row (run_id, step, at), oldest first."""
        return self._build("demo_ledger_rows", all_rows)

    def order_counts(self) -> Statement[list[Row]]:
        """How many rows each order has (order_id, rows)."""
        return self._build("demo_order_counts", all_rows)

    def looks(self) -> list[tuple[str, str]]:
        """The queries to paste into psql to look around, each with its note."""
        return [(self._build.queries[name] + ";", note) for name, note in self._LOOKS]
