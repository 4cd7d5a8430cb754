// Run by tests/e2e/test_ingest_sdk_node.py: real @sentry/node sending logs to errortrack.
// Usage: node app.mjs <dsn>. Prints one JSON array describing every log sent.
import * as Sentry from "@sentry/node";

Sentry.init({
  dsn: process.argv[2],
  enableLogs: true,
  tracesSampleRate: 1.0,
  release: "e2e-node@1",
  environment: "test",
});

const attributes = { s: "text", i: 42, d: 2.5, b: true, a: ["x", "y"] };
const levels = ["trace", "debug", "info", "warn", "error", "fatal"];
const sent = [];

function emit(level, body, span) {
  const t0 = Date.now() / 1000;
  Sentry.logger[level](body, attributes);
  const t1 = Date.now() / 1000;
  const ctx = span ? span.spanContext() : null;
  sent.push({ body, level, span_id: ctx ? ctx.spanId : null, trace_id: ctx ? ctx.traceId : null, t0, t1 });
}

for (const level of levels) emit(level, `outside ${level}`, null);
Sentry.startSpan({ name: "node-e2e-txn", op: "task" }, (span) => {
  for (const level of levels) emit(level, `in span ${level}`, span);
  Sentry.startSpan({ name: "child", op: "db" }, (child) => emit("info", "in child span", child));
});
await Sentry.flush(10000);
console.log(JSON.stringify(sent));
