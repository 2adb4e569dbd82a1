// A Node.js client emits an application event through the SQL function
// emit_event (node-postgres), inside its own transaction: rolled back, it
// never happened; committed, it wakes the Python run waiting for it.
//
// Environment: DATABASE_URL, PERDURE_SCHEMA (default "perdure"), ORDER_ID.
import assert from "node:assert/strict";
import pg from "pg";

const schema = process.env.PERDURE_SCHEMA ?? "perdure";
const orderId = Number(process.env.ORDER_ID);
const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
await client.connect();
const fn = (name) => `${client.escapeIdentifier(schema)}.${name}`;
try {
  const payload = JSON.stringify({ order_id: orderId, amount: 42, via: "node-postgres" });
  await client.query("BEGIN");
  await client.query(`SELECT ${fn("emit_event")}('order.paid', $1::jsonb, 'node-rolled-back')`, [payload]);
  await client.query("ROLLBACK");
  console.log("sql: emit rolled back");

  await client.query("BEGIN");
  const first = await client.query(
    `SELECT ${fn("emit_event")}('order.paid', $1::jsonb, $2) AS id`, [payload, `node-paid-${orderId}`]);
  await client.query("COMMIT");
  const again = await client.query(
    `SELECT ${fn("emit_event")}('order.paid', $1::jsonb, $2) AS id`, [payload, `node-paid-${orderId}`]);
  assert.equal(again.rows[0].id, first.rows[0].id);
  console.log(`sql: event emitted, id ${first.rows[0].id}`);

  const bad = await client.query(`SELECT ${fn("emit_event")}('bad name!')`).catch((e) => e);
  assert.equal(bad.code, "22023");
  console.log(`sql: bad name refused with SQLSTATE ${bad.code}`);
} finally {
  await client.end();
}
console.log("node events: all checks passed");
