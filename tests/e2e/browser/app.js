// Run in headless Chromium by tests/e2e/test_ingest_sdk_browser.py: the real @sentry/browser
// sending errors, a message, logs and spans to errortrack, cross-origin.
// Query: ?dsn=<DSN>&scenario=main|preflight. Sets window.__result (what was sent) once
// everything is flushed, or window.__failure (a stack) if the script itself failed.
import * as Sentry from "@sentry/browser";

const params = new URLSearchParams(location.search);
const scenario = params.get("scenario");
const options = {
  dsn: params.get("dsn"),
  // 11.x has no `enableLogs` (logs are always on); `Sentry.logger` needs no option.
  tracesSampleRate: 1.0,
  release: "e2e-browser@1",
  environment: "test",
};
if (scenario === "preflight") {
  // A header outside the CORS-safelisted ones: every POST is preflighted (OPTIONS).
  options.transportOptions = { headers: { "Content-Type": "application/x-sentry-envelope" } };
}
Sentry.init(options);

// One attribute of each JSON type; `o` (an object) the SDK sends as its JSON string.
const ATTRIBUTES = {
  s: "text",
  i: 42,
  big: 9007199254740991,
  d: 2.5,
  b: true,
  a: ["x", "y"],
  n: [1, 2, 3],
  o: { k: 1 },
};
const sent = { scenario, logs: [], sdk_version: Sentry.SDK_VERSION };

function log(level, body, span) {
  Sentry.logger[level](body, ATTRIBUTES);
  const ctx = span ? span.spanContext() : null;
  sent.logs.push({ body, level, trace_id: ctx?.traceId ?? null, span_id: ctx?.spanId ?? null });
}

function checkout(order) {
  throw new TypeError(`browser order ${order} has no items`);
}

async function main() {
  try {
    checkout(12);
  } catch (e) {
    sent.exception_id = Sentry.captureException(e);
  }
  sent.message_id = Sentry.captureMessage("browser payment declined by bank", "warning");
  for (const level of ["info", "warn", "error"]) log(level, `outside ${level}`, null);
  Sentry.startSpan({ name: "browser-e2e-txn", op: "ui.action" }, (root) => {
    sent.trace_id = root.spanContext().traceId;
    sent.root_span_id = root.spanContext().spanId;
    for (const level of ["info", "warn", "error"]) log(level, `in span ${level}`, root);
    Sentry.startSpan({ name: "browser-e2e-child", op: "db.query" }, (child) => {
      sent.child_span_id = child.spanContext().spanId;
      log("info", "in child span", child);
      sent.span_exception_id = Sentry.captureException(new Error("browser error in span"));
    });
  });
  // Uncaught: thrown by a timer callback, reported by the SDK's global handler (onerror)
  // while that task ends; the promise resolves in a later task.
  await new Promise((resolve) => {
    setTimeout(() => {
      setTimeout(resolve, 0);
      throw new RangeError("browser uncaught boom");
    }, 0);
  });
}

async function preflight() {
  sent.message_id = Sentry.captureMessage("browser message after a preflight");
  log("info", "preflighted log", null);
}

(async () => {
  try {
    await (scenario === "preflight" ? preflight() : main());
    sent.flushed = await Sentry.flush(5000);
    window.__result = sent;
  } catch (e) {
    window.__failure = String(e && e.stack ? e.stack : e);
  }
})();
