"""Users affected per issue (``user_count``), end to end: events sent as SDK envelopes
through real ingest, the spool, the writer and its grouping hook into real chDB and
SQLite/PostgreSQL, then read over the management API (the app as served)."""

from __future__ import annotations

import datetime as dt
import itertools
import time
from typing import Any

import orjson
import pytest
import sqlalchemy as sa

from errortrack.analytics import ClickHouse
from errortrack.analytics import migrate as ch_migrate
from errortrack.api.schemas.issues import ChangedIssueOut, IssueOut
from errortrack.ingest.items import ItemContext
from errortrack.issues.events import event_row
from errortrack.issues.read import user_counts
from errortrack.models import Issue
from errortrack.projects.service import active_key
from errortrack.spool.writer import INSERT_SETTINGS
from tests.access_world import World
from tests.ingest_support import send_events, sentry_auth

ISSUES = "/api/projects/{p}/issues"
_serial = itertools.count(1)

# Issue "many": who each event names, and the user_key ingest stores for it.
MANY = [
    ({"id": 5, "username": "bob"}, "id:5"),  # id first, whatever else is there
    ({"id": "5"}, "id:5"),  # the same user: an id as text
    ({"username": "5"}, "username:5"),  # not id 5
    ({"username": "bob", "email": "bob@example.com"}, "username:bob"),
    ({"username": "bob"}, "username:bob"),  # seen again
    ({"email": "bob@example.com"}, "email:bob@example.com"),  # as in Sentry: not username:bob
    ({"id": "", "username": None, "email": "carol@example.com"}, "email:carol@example.com"),
    ({"ip_address": "1.2.3.4"}, "ip:1.2.3.4"),
    ({"ip_address": "{{auto}}"}, ""),  # the SDK's placeholder for the client's address
    ({}, ""),
    ("bob", ""),  # not an object
    (None, ""),  # "user": null
]
MANY_USERS = 6  # id:5, username:5, username:bob, email:bob@, email:carol@, ip:1.2.3.4


def _event(fingerprint: str, *, user: Any = "absent", ago: float = 0, **fields: Any) -> dict:
    event: dict[str, Any] = {
        "event_id": f"{next(_serial):032x}",
        "message": f"boom {fingerprint}",
        "fingerprint": [fingerprint],
        "platform": "python",
        "level": "error",
        **fields,
    }
    if ago:
        event["timestamp"] = (dt.datetime.now(dt.UTC) - dt.timedelta(seconds=ago)).timestamp()
    if user != "absent":
        event["user"] = user
    return event


def _ids(world: World, project_id: int) -> dict[str, int]:
    """Issue ids by fingerprint name (the message is ``boom <name>``)."""
    with world.state.sessions() as s:
        rows = s.scalars(sa.select(Issue).where(Issue.project_id == project_id))
        return {issue.title.removeprefix("boom "): issue.id for issue in rows}


def _get(world: World, path: str, query: str = "") -> Any:
    resp = world.client.simulate_get(path, query_string=query, headers=world.headers("viewer"))
    assert resp.status_code == 200, resp.text
    return resp.json


def _user_counts(world: World, project_id: int, query: str = "") -> dict[int, int]:
    page = _get(world, ISSUES.format(p=project_id), query)
    for item in page["items"]:
        assert IssueOut().validate(item) == {}
    return {item["id"]: item["user_count"] for item in page["items"]}


@pytest.fixture
def world(ingest_world: World) -> World:
    return ingest_world


def test_user_count_counts_distinct_users_of_each_issue(world):
    p = world.project_id
    send_events(
        world,
        p,
        [_event("many", user=user) for user, _ in MANY]
        + [_event("nobody"), _event("nobody", user={})]
        + [_event("same", user={"id": "u-1"}), _event("same", user={"id": "u-1", "email": "x@y"})],
    )
    ids = _ids(world, p)
    # Ingest stored who each event names, in Sentry's order (id, username, email, IP).
    stored = dict(
        world.state.clickhouse.query_rows(
            "SELECT replaceAll(toString(event_id), '-', ''), user_key FROM events "
            "WHERE project_id = {p:UInt64} AND issue_id = {i:UInt64}",
            {"p": p, "i": ids["many"]},
        )
    )
    assert len(stored) == len(MANY)
    assert sorted(stored.values()) == sorted(key for _, key in MANY)

    assert _user_counts(world, p) == {ids["many"]: MANY_USERS, ids["nobody"]: 0, ids["same"]: 1}
    for name, users in (("many", MANY_USERS), ("nobody", 0), ("same", 1)):
        one = _get(world, f"{ISSUES.format(p=p)}/{ids[name]}")
        assert one["user_count"] == users and one["count"] == {"many": 12}.get(name, 2)
        assert IssueOut().validate(one) == {}
    # Filters pick issues; the count stays over all of an issue's stored events.
    send_events(world, p, [_event("same", user={"id": "u-2"}, environment="staging")])
    assert _user_counts(world, p, "environment=staging") == {ids["same"]: 2}
    assert _user_counts(world, p, "per_page=1&page=2&sort=-count") == {ids["same"]: 2}


def test_one_query_per_page_for_the_pages_ids_only(world, monkeypatch):
    p = world.project_id
    other = world.add_project()
    send_events(world, p, [_event(f"i{n}", user={"id": n}) for n in range(5)])
    send_events(world, other, [_event("i0", user={"id": 0}), _event("i0", user={"id": 1})])
    ids = _ids(world, p)
    store = world.state.clickhouse
    sent: list[tuple[str, Any]] = []
    real = store.query_rows

    def recorded(sql: str, parameters: Any = None, settings: Any = None) -> list[Any]:
        sent.append((sql, parameters))
        return real(sql, parameters, settings)

    monkeypatch.setattr(store, "query_rows", recorded)  # a spy: the real store answers
    page = _get(world, ISSUES.format(p=p), "per_page=2&page=2")
    shown = [item["id"] for item in page["items"]]
    assert len(shown) == 2 and set(shown) < set(ids.values())
    assert [item["user_count"] for item in page["items"]] == [1, 1]
    [(sql, params)] = sent
    assert "uniq(user_key)" in sql
    assert params == {"project_id": p, "issue_ids": shown}
    # The other project's issue with the same fingerprint has its own users.
    other_ids = _ids(world, other)
    assert _user_counts(world, other) == {other_ids["i0"]: 2}
    # A page past the end asks ClickHouse nothing.
    sent.clear()
    assert _get(world, ISSUES.format(p=p), "page=9")["items"] == []
    assert sent == []


def test_user_count_drops_when_the_issues_events_are_deleted(world):
    """Counted from the stored events: a cleanup (as retention) deleting some of them
    lowers it, and the issue's own ``count`` (events grouped into it) stays."""
    p = world.project_id
    old = 10 * 86400
    send_events(
        world,
        p,
        [
            _event("a", user={"id": 1}),
            _event("a", user={"id": 1}, ago=old),
            _event("a", user={"username": "old-1"}, ago=old),
            _event("a", user={"email": "old@example.com"}, ago=old + 60),
            _event("b", user={"id": 1}, ago=old),
        ],
    )
    ids = _ids(world, p)
    assert _user_counts(world, p) == {ids["a"]: 3, ids["b"]: 1}
    done = world.call(
        "primary", "POST", "/api/storage/cleanup", {"older_than_days": 5, "project_id": p}
    )
    assert done.status_code == 200, done.text
    assert (done.json["removed"]["events"], done.json["issues_removed"]) == (4, 1)
    # b's only event is gone, and b with it (cleanup removes issues left without events).
    assert _user_counts(world, p) == {ids["a"]: 1}
    one = _get(world, f"{ISSUES.format(p=p)}/{ids['a']}")
    assert (one["user_count"], one["count"]) == (1, 4)


def test_deleting_the_issue_leaves_no_users_behind(world):
    p = world.project_id
    send_events(
        world, p, [_event("a", user={"id": n}) for n in range(3)] + [_event("b", user={"id": 0})]
    )
    ids = _ids(world, p)
    assert _user_counts(world, p) == {ids["a"]: 3, ids["b"]: 1}
    path = f"{ISSUES.format(p=p)}/{ids['a']}"
    assert world.client.simulate_delete(path, headers=world.headers("editor")).status_code == 204
    assert _user_counts(world, p) == {ids["b"]: 1}
    # The same error again opens a new issue (a new id): only its own users count.
    send_events(world, p, [_event("a", user={"id": 0})])
    again = _ids(world, p)["a"]
    assert again != ids["a"] and _user_counts(world, p) == {again: 1, ids["b"]: 1}
    # The deleted issue's events go with its DELETE's mutation, which may not have run
    # when the API answers (seen on chDB: not done in system.mutations right after the
    # 204); then their users are counted nowhere.
    deadline = time.monotonic() + 30
    while user_counts(world.state.clickhouse, p, [ids["a"]]):
        assert time.monotonic() < deadline, "the deleted issue's events stayed"
        time.sleep(0.1)


def test_status_changes_answer_the_issue_without_asking_clickhouse(world, monkeypatch):
    p = world.project_id
    send_events(world, p, [_event("a", user={"id": 1})])
    issue = _ids(world, p)["a"]

    def unavailable(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a status change read ClickHouse")

    # Both: API requests read through a bounded copy (state.api_clickhouse), made on
    # first use, which a patch of the original alone misses once it exists.
    world.call("viewer", "GET", f"{ISSUES.format(p=p)}/{issue}")
    for store in (world.state.clickhouse, world.state.api_clickhouse):
        monkeypatch.setattr(store, "query_rows", unavailable)
    resp = world.call("editor", "POST", f"{ISSUES.format(p=p)}/{issue}/resolve")
    assert resp.status_code == 200, resp.text
    assert resp.json["status"] == "resolved" and "user_count" not in resp.json
    assert ChangedIssueOut().validate(resp.json) == {}
    monkeypatch.undo()
    assert _get(world, f"{ISSUES.format(p=p)}/{issue}")["user_count"] == 1


def test_a_row_spooled_by_the_previous_version_still_inserts(world):
    """Rows spooled (or quarantined) before this version have no ``user_key``: the writer
    inserts them as they are (JSONEachRow, ``input_format_defaults_for_omitted_fields``
    on, ClickHouse's default) and the column takes its default, ''. Their user is not
    read back out of the payload: such an event counts for no user."""
    p = world.project_id
    writer = world.state.ingest.writer
    event = _event("old", user={"id": 9})
    payload = orjson.dumps(event)
    ctx = ItemContext(p, dt.datetime.now(dt.UTC), 90, {})
    row = event_row(event, payload, event["event_id"], ctx)
    assert list(row)[-2:] == ["retention_days", "payload"] and row["user_key"] == "id:9"
    del row["user_key"]  # as the previous version wrote it, payload last
    writer.spool.append({"events": orjson.dumps(row) + b"\n"}, 1)
    writer.drain()
    assert writer.quarantined == 0 and not writer.quarantine.entries("events")
    issue = _ids(world, p)["old"]
    stored = world.state.clickhouse.query_rows(
        "SELECT user_key, issue_id FROM events WHERE project_id = {p:UInt64}", {"p": p}
    )
    assert stored == [("", issue)]
    # A new event of the same issue and user counts; the old one does not.
    send_events(world, p, [_event("old", user={"id": 9}), _event("old", user={"id": 10})])
    one = _get(world, f"{ISSUES.format(p=p)}/{issue}")
    assert (one["count"], one["user_count"]) == (3, 2)


@pytest.mark.parametrize("omitted_defaults", [1, 0])
def test_an_insert_without_user_key_reads_empty(clickhouse, omitted_defaults):
    """The writer's insert of a line without the column, with the engine's own setting
    (on by default: the column's DEFAULT) or a server profile that turned it off (the
    type's default): '' either way."""
    event = _event("x", user={"id": 3})
    payload = orjson.dumps(event)
    row = event_row(
        event, payload, event["event_id"], ItemContext(1, dt.datetime.now(dt.UTC), 90, {})
    )
    del row["user_key"]
    settings = {**INSERT_SETTINGS, "input_format_defaults_for_omitted_fields": omitted_defaults}
    clickhouse.client().raw_insert(
        "events", insert_block=orjson.dumps(row) + b"\n", fmt="JSONEachRow", settings=settings
    )
    assert clickhouse.query_rows("SELECT user_key, payload FROM events") == [("", payload.decode())]


def test_the_migration_keeps_stored_events_and_reads_them_without_a_user(chdb_dir, tmp_path):
    """0014 on a table that already holds events: they read back unchanged, with
    user_key '', and count for no user; it is idempotent (a crash before its record)."""
    store = ClickHouse(f"chdb://{chdb_dir}", database="test_user_key_migration")
    earlier = tmp_path / "ddl"
    earlier.mkdir()
    for migration in ch_migrate.load():
        if migration.name < "0014":
            (earlier / f"{migration.name}.sql").write_text(migration.sql)
    ctx = ItemContext(7, dt.datetime.now(dt.UTC), 90, {})

    def insert(event: dict[str, Any]) -> None:
        payload = orjson.dumps(event)
        row = {**event_row(event, payload, event["event_id"], ctx), "issue_id": 3}
        columns = {row[0] for row in store.query_rows("DESCRIBE TABLE events")}
        row = {k: v for k, v in row.items() if k in columns}  # as the old version's insert
        store.client().raw_insert("events", insert_block=orjson.dumps(row), fmt="JSONEachRow")

    read = "SELECT event_id, title, payload FROM events ORDER BY event_id"
    try:
        ch_migrate.apply(store, earlier)
        insert(_event("a", user={"id": 1}))
        before = store.query_rows(read)
        assert ch_migrate.apply(store)[0] == "0014_events_user_key"
        [m] = [m for m in ch_migrate.load() if m.name == "0014_events_user_key"]
        for stmt in ch_migrate.render(m, database=store.database):
            store.command(stmt)  # run again: IF NOT EXISTS
        assert store.query_rows(read) == before
        assert store.query_rows("SELECT user_key FROM events") == [("",)]
        assert user_counts(store, 7, [3]) == {}
        insert(_event("a", user={"id": 1}))
        insert(_event("a", user={"id": 2}))
        assert user_counts(store, 7, [3, 4]) == {3: 2}
    finally:
        store.drop_database()


def test_users_set_by_the_real_python_sdk(world):
    """The real sentry-sdk's events (its envelopes, captured by a transport and posted to
    ingest as sent): ``set_user`` sends a numeric id as a JSON number."""
    import sentry_sdk
    from sentry_sdk.transport import Transport

    p = world.project_id
    sent: list[bytes] = []

    class Capture(Transport):
        def capture_envelope(self, envelope: Any) -> None:
            sent.append(envelope.serialize())

    with world.state.sessions() as s:
        key = active_key(s, p).public_key
    client = sentry_sdk.Client(
        dsn=f"http://{key}@localhost/{p}", transport=Capture, default_integrations=False
    )
    try:
        for user in ({"id": 42, "email": "a@b.c"}, {"id": "42"}, {"username": "42"}, None):
            with sentry_sdk.isolation_scope() as scope:
                scope.set_client(client)
                if user is not None:
                    scope.set_user(user)
                sentry_sdk.capture_message("boom sdk")
    finally:
        client.close()
    assert len(sent) == 4 and b'"id":42' in sent[0].replace(b" ", b"")
    for body in sent:
        resp = world.client.simulate_post(
            f"/api/{p}/envelope/", body=body, headers=sentry_auth(key)
        )
        assert resp.status_code == 200, resp.text
    world.state.ingest.writer.drain()
    ids = _ids(world, p)
    assert _user_counts(world, p) == {ids["sdk"]: 2}  # id:42 and username:42
