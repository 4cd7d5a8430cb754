"""Run by tests/e2e/test_ingest_sdk_python.py: real sentry-sdk sending logs to a server.

Usage: python sdk_python_app.py <dsn>. Prints one JSON line per log with what was sent.
"""

from __future__ import annotations

import sys
import time

import orjson
import sentry_sdk

ATTRS = {"s": "text", "i": 42, "big": 2**53 + 1, "d": 2.5, "b": True, "a": ["x", "y"]}
LEVELS = ("trace", "debug", "info", "warning", "error", "fatal")


def emit(level: str, body: str, span: str | None, trace: str | None) -> None:
    before = time.time()
    getattr(sentry_sdk.logger, level)(body, attributes=ATTRS)
    after = time.time()
    line = {
        "body": body,
        "level": level,
        "span_id": span,
        "trace_id": trace,
        "t0": before,
        "t1": after,
    }
    print(orjson.dumps(line).decode(), flush=True)


def main() -> None:
    sentry_sdk.init(
        dsn=sys.argv[1],
        enable_logs=True,
        traces_sample_rate=1.0,
        release="e2e@1",
        environment="test",
    )
    for level in LEVELS:
        emit(level, f"outside {level}", None, None)
    with sentry_sdk.start_transaction(name="e2e-txn", op="task") as txn:
        for level in LEVELS:
            emit(level, f"in txn {level}", txn.span_id, txn.trace_id)
        with sentry_sdk.start_span(op="db", name="child") as child:
            emit("info", "in child span", child.span_id, child.trace_id)
    sentry_sdk.flush(timeout=10)


if __name__ == "__main__":
    main()
