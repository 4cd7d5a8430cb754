"""Helpers for ingest tests: a project with its key, envelopes, encodings."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import brotli
import orjson
import zstandard
from sqlalchemy.orm import Session

from errortrack.projects.service import active_key, create_project

ENCODERS = {
    "gzip": gzip.compress,
    "x-gzip": gzip.compress,
    "deflate": zlib.compress,
    "br": brotli.compress,
    "zstd": lambda b: zstandard.ZstdCompressor().compress(b),
    "identity": lambda b: b,
}


def make_project(
    session: Session, name: str = "shop", retention_days: int | None = None
) -> tuple[int, str]:
    project = create_project(session, name=name)
    project.retention_days = retention_days
    key = active_key(session, project.id)
    assert key is not None
    session.commit()
    return project.id, key.public_key


def log_envelope(
    logs: list[dict[str, Any]], *, with_length: bool = True, header: dict[str, Any] | None = None
) -> bytes:
    payload = orjson.dumps({"version": 2, "items": logs})
    item: dict[str, Any] = {
        "type": "log",
        "item_count": len(logs),
        "content_type": "application/vnd.sentry.items.log+json",
    }
    if with_length:
        item["length"] = len(payload)
    return orjson.dumps(header or {}) + b"\n" + orjson.dumps(item) + b"\n" + payload + b"\n"


def sentry_auth(key: str) -> dict[str, str]:
    return {"X-Sentry-Auth": f"Sentry sentry_key={key}, sentry_version=7, sentry_client=test/1.0"}
