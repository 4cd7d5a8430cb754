"""A small app instrumented with the real sentry-sdk; one scenario per run.

usage: python py_client.py <dsn> <scenario>    (prints the trace id for "trace")
"""

import sys

import sentry_sdk


def divide(order):
    # Same code path every time; only the values (and so the message) differ.
    raise ValueError(f"order {order['id']} has no items")


def checkout(order_id):
    order = {"id": order_id, "items": []}
    return divide(order)


def lookup(table):
    return table["missing"]


def capture(fn, *args):
    try:
        fn(*args)
    except Exception as exc:
        sentry_sdk.capture_exception(exc)


def errors():
    for order_id in (12, 977):
        capture(checkout, order_id)
    capture(lookup, {})


def again():
    capture(checkout, 5)


def messages():
    sentry_sdk.capture_message("payment 12 declined by bank 0x7f3a9c21")
    sentry_sdk.capture_message("payment 977 declined by bank 0x11aa22bb")


def fingerprint():
    with sentry_sdk.new_scope() as scope:
        scope.fingerprint = ["checkout-flaky"]
        capture(checkout, 1)
        capture(lookup, {})


def trace():
    with sentry_sdk.start_transaction(name="GET /e2e/py-checkout", op="http.server") as txn:
        sentry_sdk.logger.info("checkout started for {user}", user="bob")
        with txn.start_child(op="db.query", description="SELECT * FROM carts"):
            sentry_sdk.logger.info("cart loaded")
        with txn.start_child(op="http.client", description="POST https://pay.example/charge"):
            pass
        print(txn.trace_id)


if __name__ == "__main__":
    sentry_sdk.init(
        dsn=sys.argv[1],
        traces_sample_rate=1.0,
        enable_logs=True,
        release="e2e-py@1.0.0",
        environment="e2e",
    )
    globals()[sys.argv[2]]()
    sentry_sdk.flush(timeout=10)
