// A Node.js client sends an update to a running Python run and waits for its
// reply, through the SQL functions send_update and update_reply (node-postgres).
//
// Environment: DATABASE_URL, PERDURE_SCHEMA (default "perdure"), RUN (id or key).
import assert from "node:assert/strict";
import pg from "pg";

const schema = process.env.PERDURE_SCHEMA ?? "perdure";
const run = process.env.RUN;
const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
await client.connect();
const fn = (name) => `${client.escapeIdentifier(schema)}.${name}`;
try {
  const sent = await client.query(
    `SELECT ${fn("send_update")}($1, 'add_item', $2::jsonb, 'node-1') AS id`,
    [run, JSON.stringify("from node")]);
  assert.equal(sent.rows[0].id, "node-1");
  const reply = await client.query(`SELECT ${fn("update_reply")}($1, 'node-1', 30) AS reply`, [run]);
  console.log(`sql: reply ${JSON.stringify(reply.rows[0].reply)}`);

  await client.query(`SELECT ${fn("send_update")}($1, 'add_item', '""', 'node-2')`, [run]);
  const refused = await client.query(`SELECT ${fn("update_reply")}($1, 'node-2', 30)`, [run])
    .catch((e) => e);
  assert.equal(refused.code, "PU001");
  console.log(`sql: refused with SQLSTATE ${refused.code}`);
} finally {
  await client.end();
}
console.log("node updates: all checks passed");
