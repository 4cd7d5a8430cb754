"""Who is sending: the project's public key, from any of the places SDKs put it.

Places, in order: ``X-Sentry-Auth: Sentry sentry_key=...``, ``Authorization: Sentry ...``,
the ``sentry_key`` query parameter, and (only when none of those is there) the envelope
header's ``dsn``. Keys are cached in memory for a few seconds so that ingest does not
hit the relational store per request; a disabled key stops working within that expiry
(or, while the store cannot be read, once it can: ``STALE_SECONDS``).
"""

from __future__ import annotations

import dataclasses
import re
import threading
import time
from collections.abc import Callable
from urllib.parse import urlsplit

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.errors import Forbidden, Unauthorized, Unavailable
from errortrack.models import Project, ProjectKey

KEY_SHAPE = re.compile(r"[A-Za-z0-9]{1,64}")
FORBIDDEN = "this key may not send to this project"


def _sentry_pairs(value: str, where: str) -> str:
    scheme, _, rest = value.strip().partition(" ")
    if scheme.lower() != "sentry":
        raise Unauthorized(f"{where} must start with 'Sentry '", field=where)
    for pair in rest.split(","):
        name, _, val = pair.strip().partition("=")
        if name.strip() == "sentry_key":
            return val.strip()
    raise Unauthorized(f"{where} has no sentry_key", field=where)


def key_from_request(
    x_sentry_auth: str | None, authorization: str | None, query_key: str | None
) -> str | None:
    """The public key from headers or query; None when none of them carries one."""
    if x_sentry_auth:
        return _checked(_sentry_pairs(x_sentry_auth, "X-Sentry-Auth"), "X-Sentry-Auth")
    if authorization and authorization.strip().lower().startswith("sentry "):
        return _checked(_sentry_pairs(authorization, "Authorization"), "Authorization")
    if query_key is not None:
        return _checked(query_key, "sentry_key")
    return None


def key_from_dsn(dsn: object) -> str:
    if not isinstance(dsn, str) or not dsn:
        raise Unauthorized("no sentry_key: send X-Sentry-Auth, ?sentry_key= or a dsn")
    try:
        username = urlsplit(dsn).username
    except ValueError:  # an unbalanced "[" (an IPv6 host) or a bad port
        raise Unauthorized("malformed dsn", field="dsn") from None
    return _checked(username or "", "dsn")


def _checked(key: str, where: str) -> str:
    # fullmatch: "$" also matched before a final newline, so "<key>\n" was looked up
    # (and cached) and answered 403 instead of the malformed key's 401.
    if not KEY_SHAPE.fullmatch(key):
        raise Unauthorized(f"malformed sentry_key in {where}", field=where)
    return key


@dataclasses.dataclass(frozen=True)
class KeyInfo:
    project_id: int
    active: bool
    # The project's own retention, or None for the instance default.
    retention_days: int | None


# How long a key's last answer stands in for a relational store that cannot be read,
# and how soon a load is tried again meanwhile. Without it every SDK's logs and events
# were 503s from 10 s (the expiry) into an outage, although they need nothing more from
# that store until the spool is inserted. The price: a key disabled (or a project
# deleted) just before an outage goes on working until the store answers again, at most
# this long.
STALE_SECONDS = 600.0
RETRY_SECONDS = 2.0


class KeyCache:
    """public key -> KeyInfo (or None: unknown), each entry trusted for ``ttl`` seconds,
    and for up to ``stale_for`` seconds more while loading it fails (``Unavailable``)."""

    def __init__(
        self,
        ttl: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        stale_for: float = STALE_SECONDS,
    ) -> None:
        self.ttl = ttl
        self.clock = clock
        self.stale_for = stale_for
        self._lock = threading.Lock()
        # key -> (trusted until, the answer, when it was loaded)
        self._entries: dict[str, tuple[float, KeyInfo | None, float]] = {}

    def cached(self, key: str) -> tuple[bool, KeyInfo | None]:
        """(True, the entry) when ``lookup`` would answer without loading, else (False, None)."""
        with self._lock:
            hit = self._entries.get(key)
        if hit is not None and hit[0] > self.clock():
            return True, hit[1]
        return False, None

    def stale(self, key: str) -> tuple[bool, KeyInfo | None]:
        """(True, the last answer) when one was loaded within ``stale_for`` seconds,
        expired or not, else (False, None): what a request may use while a load is
        under way."""
        with self._lock:
            hit = self._entries.get(key)
        if hit is not None and self.clock() - hit[2] <= self.stale_for:
            return True, hit[1]
        return False, None

    def lookup(self, key: str, load: Callable[[str], KeyInfo | None]) -> KeyInfo | None:
        now = self.clock()
        with self._lock:
            hit = self._entries.get(key)
        if hit is not None and hit[0] > now:
            return hit[1]
        try:
            info = load(key)
        except Unavailable:
            if hit is None or now - hit[2] > self.stale_for:
                raise
            with self._lock:
                self._entries[key] = (now + RETRY_SECONDS, hit[1], hit[2])
            return hit[1]
        with self._lock:
            if len(self._entries) > 100_000:
                self._entries.clear()  # bound memory against random-key floods
            self._entries[key] = (now + self.ttl, info, now)
        return info


def load_key(session: Session, key: str) -> KeyInfo | None:
    row = session.execute(
        sa.select(ProjectKey.project_id, ProjectKey.is_active, Project.retention_days)
        .join(Project, Project.id == ProjectKey.project_id)
        .where(ProjectKey.public_key == key)
    ).first()
    return None if row is None else KeyInfo(row[0], bool(row[1]), row[2])


def authorize(info: KeyInfo | None, project_id: int) -> KeyInfo:
    """403 alike for an unknown key, another project's key, an unknown project or a
    disabled key: the answer must not reveal which projects exist."""
    if info is None or info.project_id != project_id or not info.active:
        raise Forbidden(FORBIDDEN)
    return info
