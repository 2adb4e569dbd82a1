// A Node.js client of perdure that knows nothing of Python: node-postgres for
// the SQL functions, the built-in fetch for the HTTP API. It drives the
// "chat" workflow (tests/http_api/workload.py) against a real worker:
// start, event, signal, stream, result, once through each door.
//
// Environment: DATABASE_URL, PERDURE_SCHEMA (default "perdure"),
// PERDURE_API (e.g. http://127.0.0.1:8080/api/v1), PERDURE_TOKEN (optional).
import assert from "node:assert/strict";
import pg from "pg";

const schema = process.env.PERDURE_SCHEMA ?? "perdure";
const api = process.env.PERDURE_API;
const headers = { "content-type": "application/json" };
if (process.env.PERDURE_TOKEN) headers.authorization = `Bearer ${process.env.PERDURE_TOKEN}`;
const deadline = Date.now() + 60_000;

async function until(what, poll) {
  for (let wait = 20; Date.now() < deadline; wait = Math.min(wait * 2, 250)) {
    const found = await poll();
    if (found !== undefined) return found;
    await new Promise((resolve) => setTimeout(resolve, wait));
  }
  throw new Error(`timed out waiting for ${what}`);
}

async function throughSql() {
  const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
  await client.connect();
  const fn = (name) => `${client.escapeIdentifier(schema)}.${name}`;
  try {
    // A start inside the caller's transaction: rolled back, it never happened.
    await client.query("BEGIN");
    await client.query(`SELECT ${fn("start_run")}('chat', '{}', p_key => 'node-sql-rolled-back')`);
    await client.query("ROLLBACK");
    const gone = await client.query(`SELECT ${fn("run_status")}('node-sql-rolled-back')`).catch((e) => e);
    assert.equal(gone.code, "P0002");

    await client.query("BEGIN");
    const started = await client.query(
      `SELECT ${fn("start_run")}($1, $2::jsonb, p_key => $3, p_tags => $4::jsonb) AS id`,
      ["chat", JSON.stringify({ from: "node" }), "node-sql-1", JSON.stringify({ client: "node" })],
    );
    await client.query("COMMIT");
    const id = started.rows[0].id;
    console.log(`sql: started run ${id}`);

    const bad = await client.query(`SELECT ${fn("start_run")}('no.such.workflow')`).catch((e) => e);
    assert.equal(bad.code, "42704");
    console.log(`sql: unknown workflow refused with SQLSTATE ${bad.code}: ${bad.message}`);

    const ready = await until("the ready event", async () => {
      const { rows } = await client.query(`SELECT ${fn("get_event")}($1, 'ready') AS value`, [id]);
      return rows[0].value ?? undefined;
    });
    console.log(`sql: event ready = ${JSON.stringify(ready)}`);

    await client.query(`SELECT ${fn("send_signal")}($1, 'reply', $2::jsonb)`, [id, '"from node-postgres"']);
    console.log("sql: signal reply sent");

    const words = [];
    let after = 0;
    await until("the end of the stream", async () => {
      const { rows } = await client.query(
        `SELECT seq, value, closed FROM ${fn("read_stream")}($1, 'words', $2)`,
        [id, after],
      );
      for (const row of rows) {
        after = row.seq;
        if (row.closed) return true;
        words.push(row.value);
      }
      return undefined;
    });
    console.log(`sql: stream words = ${JSON.stringify(words)}`);
    assert.deepEqual(words, ["hello", "from node-postgres"]);

    const done = await until("the run's end", async () => {
      const { rows } = await client.query(`SELECT status, output FROM ${fn("run_status")}($1)`, [id]);
      return rows[0].status === "completed" ? rows[0] : undefined;
    });
    console.log(`sql: run ${done.status}, output = ${JSON.stringify(done.output)}`);
    assert.deepEqual(done.output, { got: "from node-postgres" });
  } finally {
    await client.end();
  }
}

async function throughHttp() {
  const call = async (method, path, body, extra = {}) => {
    const response = await fetch(`${api}${path}`, {
      method,
      headers: { ...headers, ...extra },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return { status: response.status, type: response.headers.get("content-type"), body: await response.json() };
  };
  const start = { workflow: "chat", input: { from: "fetch" } };
  const first = await call("POST", "/runs", start, { "idempotency-key": "node-http-1" });
  assert.equal(first.status, 201);
  const again = await call("POST", "/runs", start, { "idempotency-key": "node-http-1" });
  assert.equal(again.status, 200);
  assert.equal(again.body.id, first.body.id);
  const id = first.body.id;
  console.log(`http: started run ${id} (201), same key again: ${again.status}, same run`);

  const refused = await call("POST", "/runs", { workflow: "no.such.workflow" });
  assert.equal(refused.type, "application/problem+json");
  console.log(`http: unknown workflow refused: ${refused.status} ${refused.body.code}`);

  const ready = await call("GET", `/runs/${id}/events/ready?timeout=30`);
  assert.equal(ready.status, 200);
  console.log(`http: event ready = ${JSON.stringify(ready.body.value)}`);

  const sent = await call("POST", `/runs/${id}/signals`, { name: "reply", payload: "from fetch" });
  assert.equal(sent.status, 202);
  console.log(`http: signal reply sent (${sent.status}, signal ${sent.body.signal_id})`);

  // Server-Sent Events, read from fetch's body stream.
  const response = await fetch(`${api}/runs/${id}/streams/words`, { headers });
  assert.match(response.headers.get("content-type"), /^text\/event-stream/);
  const decoder = new TextDecoder();
  let text = "";
  for await (const chunk of response.body) text += decoder.decode(chunk, { stream: true });
  const events = text.trim().split("\n\n").map((block) => Object.fromEntries(
    block.split("\n").map((line) => [line.slice(0, line.indexOf(":")), line.slice(line.indexOf(":") + 2)]),
  ));
  const words = events.filter((e) => e.event === "entry").map((e) => JSON.parse(e.data));
  assert.equal(events.at(-1).event, "end");
  console.log(`http: SSE words = ${JSON.stringify(words)}`);
  assert.deepEqual(words, ["hello", "from fetch"]);

  const result = await call("GET", `/runs/${id}/result?timeout=30`);
  assert.equal(result.status, 200);
  assert.deepEqual(result.body.output, { got: "from fetch" });
  console.log(`http: run ${result.body.status}, output = ${JSON.stringify(result.body.output)}`);
}

await throughSql();
await throughHttp();
console.log("node client: all checks passed");
