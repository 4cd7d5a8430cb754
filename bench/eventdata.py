"""Realistic error events, shaped like what sentry-sdk 2.x sends (../shared/fixtures), for
benchmarks: about 8 KB each, spread over a chosen number of distinct code paths.

A code path (the "kind" of an event) is an exception type raised in one in-app function;
events of the same kind differ in line numbers, variable values, message numbers, ids
and timestamps, so they must all land in one issue.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from typing import Any

import orjson

TYPES = (
    "ValueError",
    "KeyError",
    "TypeError",
    "ZeroDivisionError",
    "RuntimeError",
    "AttributeError",
    "IndexError",
    "TimeoutError",
    "PermissionError",
    "LookupError",
)
FUNCTIONS = (
    "checkout",
    "charge_card",
    "load_cart",
    "apply_coupon",
    "ship_order",
    "render_invoice",
    "refund",
    "sync_stock",
    "send_receipt",
    "price_items",
    "validate_address",
    "reserve_items",
    "notify_warehouse",
    "compute_tax",
    "load_user",
    "save_order",
    "parse_webhook",
    "rotate_keys",
    "export_report",
    "merge_carts",
)
LIBRARY = [
    ("django.core.handlers.base", "_get_response"),
    ("django.views.generic.base", "view"),
    ("rest_framework.views", "dispatch"),
    ("rest_framework.views", "handle_exception"),
    ("sentry_sdk.integrations.django", "sentry_wrapped_callback"),
]


def kinds(n: int) -> list[tuple[str, str]]:
    """``n`` distinct (exception type, function) code paths."""
    return [(TYPES[i % len(TYPES)], FUNCTIONS[i // len(TYPES) % len(FUNCTIONS)]) for i in range(n)]


def _frame(module: str, function: str, rng: random.Random, in_app: bool) -> dict[str, Any]:
    path = module.replace(".", "/")
    return {
        "filename": f"{path}.py",
        "abs_path": f"/srv/app/{path}.py"
        if in_app
        else f"/usr/lib/python3.11/site-packages/{path}.py",
        "function": function,
        "module": module,
        "lineno": rng.randrange(10, 900),
        "pre_context": [
            f"    value_{i} = compute(value_{i - 1}, {rng.randrange(100)})" for i in range(5)
        ],
        # The same code path has the same source line (grouping reads it since the
        # twentieth session; a random literal here made 1,920 issues of 200 kinds).
        "context_line": f"    return {function}_impl(order, retries=retries)",
        "post_context": ["", "", f"def {function}_impl(order, retries):", "    ...", ""],
        "vars": {
            "order": f"{{'id': {rng.randrange(10**6)}, 'total': {rng.random() * 500:.2f}}}",
            "retries": str(rng.randrange(5)),
            "self": "<OrderService object at 0x7f3a9c21>",
        },
        "in_app": in_app,
    }


def event(kind: tuple[str, str], rng: random.Random, now: float) -> dict[str, Any]:
    type_, function = kind
    frames = [_frame(m, f, rng, False) for m, f in LIBRARY]
    frames += [
        _frame("shop.api.views", "post", rng, True),
        _frame("shop.services.orders", "handle", rng, True),
        _frame(f"shop.services.{function}", function, rng, True),
    ]
    return {
        "event_id": uuid.UUID(int=rng.getrandbits(128)).hex,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now))
        + f".{rng.randrange(10**6):06d}Z",
        "level": "error",
        "platform": "python",
        "release": "shop@1.4.2",
        "environment": "production",
        "server_name": f"web-{rng.randrange(8)}",
        "exception": {
            "values": [
                {
                    "type": type_,
                    "value": f"order {rng.randrange(10**6)} failed in {function}: "
                    f"code {rng.randrange(600)}",
                    "mechanism": {"type": "django", "handled": False},
                    "stacktrace": {"frames": frames},
                }
            ]
        },
        "contexts": {
            "trace": {
                "trace_id": f"{rng.getrandbits(128):032x}",
                "span_id": f"{rng.getrandbits(64):016x}",
            },
            "runtime": {"name": "CPython", "version": "3.11.7"},
        },
        "request": {
            "method": "POST",
            "url": f"https://shop.example/api/orders/{rng.randrange(10**6)}",
            "headers": {"User-Agent": "Mozilla/5.0", "Accept": "application/json"},
        },
        "breadcrumbs": {
            "values": [
                {
                    "timestamp": now - i,
                    "category": "query",
                    "message": f"SELECT * FROM orders WHERE id = {rng.randrange(10**6)}",
                }
                for i in range(8)
            ]
        },
        "sdk": {"name": "sentry.python.django", "version": "2.75.0"},
        "extra": {"sys.argv": ["gunicorn", "shop.wsgi"]},
        # The SDK lists installed packages with every error event.
        "modules": {f"package-{i}": f"{i % 7}.{i % 13}.{i % 5}" for i in range(50)},
    }


def with_new_event_id(body: bytes) -> bytes:
    """The same envelope as a new event: an SDK gives every event its own id, and the
    server drops an event whose id it has stored already (a resend)."""
    assert body.startswith(b'{"event_id":"'), body[:40]
    return body.replace(body[13:45], os.urandom(16).hex().encode())


def envelope(ev: dict[str, Any]) -> bytes:
    """One event per envelope, as the SDKs send them."""
    payload = orjson.dumps(ev)
    header = orjson.dumps({"event_id": ev["event_id"], "sent_at": ev["timestamp"]})
    item = orjson.dumps(
        {"type": "event", "content_type": "application/json", "length": len(payload)}
    )
    return header + b"\n" + item + b"\n" + payload + b"\n"
