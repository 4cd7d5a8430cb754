// A small app instrumented with the real @sentry/node; one scenario per run.
// usage: node issues_client.js <dsn> <scenario>   (prints the trace id for trace scenarios)
const Sentry = require('@sentry/node');

const [dsn, scenario] = process.argv.slice(2);
Sentry.init({
  dsn,
  tracesSampleRate: 1.0,
  enableLogs: true,
  release: 'e2e-node@1.0.0',
  environment: 'e2e',
  // Node 11 streams spans (span v2 items); "static" sends classic transactions as Node 10 did.
  traceLifecycle: scenario === 'trace_static' ? 'static' : 'stream',
});

function divide(order) {
  // Same code path every time; only the values (and so the message) differ.
  throw new TypeError(`order ${order.id} has no items`);
}
function checkout(orderId) {
  return divide({ id: orderId, items: [] });
}
function lookup(table) {
  return table.missing.name;
}
function capture(fn, ...args) {
  try {
    fn(...args);
  } catch (e) {
    Sentry.captureException(e);
  }
}

const scenarios = {
  errors() {
    for (const id of [12, 977]) capture(checkout, id);
    capture(lookup, {});
  },
  again() {
    capture(checkout, 5);
  },
  messages() {
    Sentry.captureMessage('payment 12 declined by bank 0x7f3a9c21');
    Sentry.captureMessage('payment 977 declined by bank 0x11aa22bb');
  },
  fingerprint() {
    Sentry.withScope((scope) => {
      scope.setFingerprint(['checkout-flaky']);
      capture(checkout, 1);
      capture(lookup, {});
    });
  },
  trace() {
    Sentry.startSpan({ name: 'GET /e2e/node-checkout', op: 'http.server' }, (root) => {
      Sentry.logger.info(Sentry.logger.fmt`checkout started for ${'bob'}`);
      Sentry.startSpan({ name: 'SELECT * FROM carts', op: 'db.query' }, () => {
        Sentry.logger.info('cart loaded');
      });
      Sentry.startSpan({ name: 'POST https://pay.example/charge', op: 'http.client' }, () => {});
      console.log(root.spanContext().traceId);
    });
  },
};
scenarios.trace_static = scenarios.trace;

(async () => {
  scenarios[scenario]();
  await Sentry.flush(10000);
})();
