-- Named queries of `perdure demo` (perdure.demo, perdure.cli.demo): its own
-- tables, the rows its steps write as evidence, and the queries it shows the
-- user to paste into psql. They live in the App's schema, beside perdure's.
-- Rows are stamped with {now}, the transaction's time as the checkpoints are:
-- a ledger row later than its step's checkpoint is a re-execution.

-- name: demo_create_ledger
-- One row per execution of a step, with the process that ran it.
CREATE TABLE IF NOT EXISTS {schema}.demo_ledger (
    run_id uuid NOT NULL,
    step   text NOT NULL,
    pid    integer NOT NULL,
    at     timestamptz NOT NULL
);

-- name: demo_create_orders
-- No unique key on purpose: a constraint would turn a duplicate order into
-- an error and hide it; the demo shows that no duplicate is ever written.
CREATE TABLE IF NOT EXISTS {schema}.demo_orders (
    order_id     integer NOT NULL,
    run_id       uuid NOT NULL,
    amount_cents integer NOT NULL,
    charge_id    text NOT NULL,
    created_at   timestamptz NOT NULL
);

-- name: demo_create_payments
-- Each attempt at the (simulated) payment gateway.
CREATE TABLE IF NOT EXISTS {schema}.demo_payments (
    run_id  uuid NOT NULL,
    outcome text NOT NULL,
    pid     integer NOT NULL,
    at      timestamptz NOT NULL
);

-- name: demo_tables
-- Which of the demo's tables holding data exist in the schema.
SELECT c.relname AS name
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = %(schema_name)s AND c.relname IN ('demo_ledger', 'demo_orders');

-- name: demo_ledger_any
-- Whether the ledger holds a row.
SELECT EXISTS (SELECT 1 FROM {schema}.demo_ledger) AS found;

-- name: demo_orders_any
-- Whether the orders table holds a row.
SELECT EXISTS (SELECT 1 FROM {schema}.demo_orders) AS found;

-- name: demo_record_step
-- The ledger row of one execution of a step.
INSERT INTO {schema}.demo_ledger (run_id, step, pid, at)
VALUES (%(run_id)s, %(step)s, %(pid)s, {now});

-- name: demo_payment_timeouts
-- How many times the gateway timed out for this run so far.
SELECT count(*) AS timeouts FROM {schema}.demo_payments
WHERE run_id = %(run_id)s AND outcome = 'timeout';

-- name: demo_record_payment
-- One attempt at the gateway: 'timeout' or 'charged'.
INSERT INTO {schema}.demo_payments (run_id, outcome, pid, at)
VALUES (%(run_id)s, %(outcome)s, %(pid)s, {now});

-- name: demo_record_order
-- The order row, written in the checkpoint's transaction (exactly once).
INSERT INTO {schema}.demo_orders (order_id, run_id, amount_cents, charge_id, created_at)
VALUES (%(order_id)s, %(run_id)s, %(amount_cents)s, %(charge_id)s, {now});

-- name: demo_ledger_rows
-- Every ledger row, oldest first.
SELECT run_id::text AS run_id, step, at FROM {schema}.demo_ledger ORDER BY at;

-- name: demo_order_counts
-- How many rows each order has (more than one would be a duplicate).
SELECT order_id, count(*) AS rows FROM {schema}.demo_orders GROUP BY order_id;

-- name: demo_look_statuses
-- Shown to the user: the runs by status.
SELECT status, count(*) FROM {schema}.runs GROUP BY status;

-- name: demo_look_events
-- Shown to the user: the history's events, most frequent first.
SELECT event, count(*) FROM {schema}.history GROUP BY event ORDER BY 2 DESC;

-- name: demo_look_reruns
-- Shown to the user: the steps in flight when the worker died.
SELECT run_id, step, pid, at FROM {schema}.demo_ledger WHERE (run_id, step) IN
    (SELECT run_id, step FROM {schema}.demo_ledger GROUP BY 1, 2 HAVING count(*) > 1)
    ORDER BY run_id, at;

-- name: demo_look_payments
-- Shown to the user: every attempt at the gateway.
SELECT run_id, outcome, pid, at FROM {schema}.demo_payments ORDER BY run_id, at;

-- name: demo_look_duplicates
-- Shown to the user: orders written twice (none: exactly once).
SELECT order_id, count(*) FROM {schema}.demo_orders GROUP BY 1 HAVING count(*) > 1;
