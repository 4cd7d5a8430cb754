"""Who an event happened to (``events.user_key``): Sentry's order for its user tag, the
row's shape for the spool and the writer, and the migration on a cluster."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import orjson
import pytest

from errortrack.analytics import migrate
from errortrack.ingest.envelope import parse
from errortrack.ingest.items import ItemContext
from errortrack.issues.events import event_row, user_key
from errortrack.spool.writer import decode_row

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "sdk-envelopes"
CTX = ItemContext(42, dt.datetime(2026, 11, 22, 3, 0, tzinfo=dt.UTC), 30, {})


@pytest.mark.parametrize(
    ("user", "key"),
    [
        ({"id": "u-42", "username": "bob", "email": "b@x.io", "ip_address": "1.2.3.4"}, "id:u-42"),
        ({"username": "bob", "email": "b@x.io", "ip_address": "1.2.3.4"}, "username:bob"),
        ({"email": "b@x.io", "ip_address": "1.2.3.4"}, "email:b@x.io"),
        ({"ip_address": "1.2.3.4"}, "ip:1.2.3.4"),
        ({"ip_address": "2001:db8::1"}, "ip:2001:db8::1"),
        # id 5 and username "5" are different users; an id as a number is its text.
        ({"id": 5}, "id:5"),
        ({"id": "5"}, "id:5"),
        ({"username": "5"}, "username:5"),
        ({"id": 5.0}, "id:5"),  # as Relay writes a whole float
        ({"id": 1.5}, "id:1.5"),
        ({"id": -7}, "id:-7"),
        ({"id": 0}, "id:0"),  # a value, unlike an empty string
        ({"id": 2**70}, f"id:{2**70}"),
        # Empty and non-values fall through to the next field.
        ({"id": "", "username": "bob"}, "username:bob"),
        ({"id": None, "email": "b@x.io"}, "email:b@x.io"),
        ({"id": True, "email": "b@x.io"}, "email:b@x.io"),
        ({"id": {"n": 1}, "username": ["bob"], "email": "b@x.io"}, "email:b@x.io"),
        ({"id": " "}, "id: "),  # kept as sent
        ({"id": "a\x00b"}, "id:a\x00b"),
        ({"name": "Bob", "data": {"plan": "pro"}, "geo": {"city": "Oslo"}}, ""),
        ({"ip_address": "{{auto}}"}, ""),  # the SDK's placeholder: no address known here
        ({"email": "b@x.io", "ip_address": "{{auto}}"}, "email:b@x.io"),
        ({"id": "{{auto}}"}, "id:{{auto}}"),  # a placeholder only as an address
        ({}, ""),
        ({"id": ""}, ""),
    ],
)
def test_user_key_takes_the_first_field_with_a_value(user, key):
    assert user_key({"message": "m", "user": user}) == key


@pytest.mark.parametrize("user", [None, "bob", 5, ["id", 5], True, ""])
def test_a_missing_or_non_object_user_is_no_user(user):
    assert user_key({"user": user}) == ""
    assert user_key({"message": "no user"}) == ""


def _fixture_events() -> list[tuple[dict, bytes]]:
    found = []
    for path in sorted(FIXTURES.rglob("*.envelope")):
        for headers, payload in parse(path.read_bytes()).items:
            if headers["type"] == "event":
                found.append((orjson.loads(payload), payload))
    assert len(found) >= 10
    return found


def test_rows_carry_user_key_before_the_payload():
    """A scalar column, before ``payload``: the writer's grouping hook splits each
    spooled line at ``,"payload":`` and parses only what is before it."""
    for event, payload in _fixture_events():
        row = event_row(event, payload, "aacf9e42aa114d73accfed70a6848b69", CTX)
        assert row["user_key"] == ""  # the SDKs' fixtures set no user
        assert list(row)[-1] == "payload" and list(row).index("user_key") < len(row) - 1
        event = {**event, "user": {"id": 7, "email": "a@b.c"}}
        row = event_row(event, orjson.dumps(event), "aacf9e42aa114d73accfed70a6848b69", CTX)
        assert row["user_key"] == "id:7"
        line = orjson.dumps(row)
        decoded = decode_row(line)
        assert isinstance(decoded["payload"], orjson.Fragment)  # the fast path
        assert decoded["user_key"] == "id:7"
        assert orjson.dumps(decoded) == line


def test_the_migration_adds_the_column_on_local_and_distributed_tables():
    [m] = [m for m in migrate.load() if m.name == "0014_events_user_key"]
    alter = "ADD COLUMN IF NOT EXISTS user_key String DEFAULT '' AFTER span_id"
    assert migrate.render(m, database="et") == [f"ALTER TABLE events {alter}"]
    assert migrate.render(m, database="et", cluster="c") == [
        f"ALTER TABLE events_local ON CLUSTER 'c' {alter}",
        f"ALTER TABLE events ON CLUSTER 'c' {alter}",
    ]
