"""Run by tests/e2e/test_logs_sdk_api.py: the real sentry-sdk sends logs to a server.

Usage: python logs_client.py <dsn>. Prints, per log, the JSON the SDK puts on the wire
(computed by the SDK's own serializer in ``before_send_log``).
"""

from __future__ import annotations

import copy
import sys
import time
from typing import Any

import orjson
import sentry_sdk
from sentry_sdk._log_batcher import LogBatcher

LEVELS = ("trace", "debug", "info", "warning", "error", "fatal")


def record(log: Any, _hint: Any) -> Any:
    wire = LogBatcher._to_transport_format(copy.deepcopy(log))
    print(orjson.dumps(wire).decode(), flush=True)
    return log


def main() -> None:
    sentry_sdk.init(
        dsn=sys.argv[1],
        enable_logs=True,
        traces_sample_rate=1.0,
        release="shop@1.2.3",
        environment="e2e",
        before_send_log=record,
    )
    for i, level in enumerate(LEVELS):
        attributes = {
            "http.status_code": 500 + i,
            "user.id": f"user-{i}",
            "ratio": 0.5 + i,
            "retry": i % 2 == 0,
        }
        getattr(sentry_sdk.logger, level)(f"plain {level} message", attributes=attributes)
        time.sleep(0.03)  # distinct timestamps, so time ranges can fall between logs
    sentry_sdk.logger.info("discount 100% off_sale applied", attributes={"user.id": "user-9"})
    time.sleep(0.03)
    with (
        sentry_sdk.start_transaction(name="checkout", op="http.server"),
        sentry_sdk.start_span(op="db", name="load cart"),
    ):
        sentry_sdk.logger.info("in span one", attributes={"http.status_code": 503})
        time.sleep(0.03)
        sentry_sdk.logger.error("in span two", attributes={"http.status_code": "503"})
        try:
            raise ValueError("card declined")
        except ValueError as exc:  # an error event in the same span: the trace's story
            sentry_sdk.capture_exception(exc)
    sentry_sdk.flush(timeout=10)


if __name__ == "__main__":
    main()
