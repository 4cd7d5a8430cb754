"""Keyset cursors on the issues list and the events lists (in-process app as served,
real chDB and SQLite/Postgres): a walk by cursor sees every item that does not change
meanwhile exactly once, in order, while events hit issues, issues are created, resolved
and deleted, and events arrive; numbered pages (offsets), in the same walk, repeat some
and skip others. Ties cross page edges; a cursor that was not handed out is a 400."""

from __future__ import annotations

import base64
import collections
import dataclasses
import datetime as dt
import json
import random
import uuid
from collections.abc import Callable
from typing import Any

import orjson
import pytest
import sqlalchemy as sa

from errortrack import db
from errortrack.errors import ValidationError
from errortrack.ingest.items import ItemContext
from errortrack.issues import read
from errortrack.issues.cursor import IssueCursor
from errortrack.issues.events import event_row
from errortrack.models import Issue
from errortrack.paging import PageRequest
from tests.access_world import World
from tests.ingest_support import send_events
from tests.issue_data import add_issue
from tests.logs_data import BASE

SORTS = ["-last_seen", "last_seen", "-first_seen", "-count", "id", "-id"]
ISSUES = "/api/projects/{p}/issues"


def _get(w: World, path: str, query: str = "") -> Any:
    return w.client.simulate_get(path, query_string=query, headers=w.headers("viewer"))


def _ok(resp: Any) -> dict[str, Any]:
    assert resp.status_code == 200, resp.text
    body: dict[str, Any] = resp.json
    return body


def _key(item: dict[str, Any]) -> Any:
    return item.get("id", item.get("event_id"))


def cursor_walk(
    w: World,
    path: str,
    query: str,
    between: Callable[[int, list[Any]], None] = lambda n, seen: None,
) -> list[Any]:
    """Every page by cursor; ``between(pages read, ids seen)`` runs after each page."""
    body = _ok(_get(w, path, query))
    seen = [_key(item) for item in body["items"]]
    pages = 1
    while body["next_cursor"]:
        between(pages, seen)
        body = _ok(_get(w, path, f"{query}&cursor={body['next_cursor']}"))
        assert body["page"] is None
        seen += [_key(item) for item in body["items"]]
        pages += 1
        assert pages < 1000
    return seen


def numbered_walk(
    w: World,
    path: str,
    query: str,
    between: Callable[[int, list[Any]], None] = lambda n, seen: None,
) -> list[Any]:
    """Every numbered page until one comes back short, the way offsets are walked."""
    seen: list[Any] = []
    page = 1
    while True:
        body = _ok(_get(w, path, f"{query}&page={page}"))
        assert body["page"] == page
        seen += [_key(item) for item in body["items"]]
        if len(body["items"]) < body["per_page"]:
            return seen
        between(page, seen)
        page += 1


def _at(seconds: float) -> dt.datetime:
    return BASE + dt.timedelta(seconds=seconds)


def _issue_keys(w: World) -> dict[int, tuple[Any, ...]]:
    """Each issue's (last_seen, first_seen, count, status) now."""
    with w.state.sessions() as s:
        rows = s.execute(
            sa.select(Issue.id, Issue.last_seen, Issue.first_seen, Issue.event_count, Issue.status)
        ).all()
    return {row[0]: tuple(row[1:]) for row in rows}


def _hit(w: World, issue_id: int, at: float) -> None:
    """What grouping does to an issue an event (dated ``at``) is counted into."""
    with db.unit_of_work(w.state.sessions) as s:
        issue = s.get(Issue, issue_id)
        if issue is not None:
            issue.event_count += 1
            issue.last_seen = max(issue.last_seen, _at(at))
            issue.first_seen = min(issue.first_seen, _at(at))


@dataclasses.dataclass
class Busy:
    """A project of 200 issues (last_seen, first_seen and count drawn from few values,
    so that many tie) and the changes made during a walk of it."""

    w: World
    rng: random.Random
    before: dict[int, tuple[Any, ...]]
    touched: set[int] = dataclasses.field(default_factory=set)
    deleted: set[int] = dataclasses.field(default_factory=set)
    created: set[int] = dataclasses.field(default_factory=set)

    @property
    def path(self) -> str:
        return ISSUES.format(p=self.w.project_id)

    def change(self, pages: int, seen: list[Any]) -> None:
        """After each page: events hit issues already passed and others (one of them
        dated before its first_seen, as an SDK's buffered event), an issue is created,
        one resolved, two passed ones and one other deleted."""
        w, rng = self.w, self.rng
        alive = sorted(set(self.before) - self.deleted)
        passed = [i for i in seen if i in self.before and i not in self.deleted]
        for issue_id in rng.sample(passed, min(3, len(passed))) + rng.sample(alive, 3):
            _hit(w, issue_id, 5000 + pages)
            self.touched.add(issue_id)
        early = rng.choice(alive)
        _hit(w, early, -5000 - pages)
        self.touched.add(early)
        self.created.add(add_issue(w.state, w.project_id, "new", seen=(6000, 6000 + pages)))
        resolved = rng.choice(alive)
        resp = w.call("editor", "POST", f"{self.path}/{resolved}/resolve")
        assert resp.status_code == 200, resp.text
        self.touched.add(resolved)
        doomed = set(rng.sample(passed, min(2, len(passed)))) | {rng.choice(alive)}
        for issue_id in doomed - self.deleted:
            assert w.call("editor", "DELETE", f"{self.path}/{issue_id}").status_code == 204
            self.deleted.add(issue_id)
            self.touched.add(issue_id)

    def untouched(self) -> set[int]:
        return set(self.before) - self.touched


@pytest.fixture
def busy(ingest_world: World) -> Busy:
    w = ingest_world
    rng = random.Random(7)
    with db.unit_of_work(w.state.sessions) as s:
        s.add_all(
            Issue(
                project_id=w.project_id,
                fingerprint=uuid.uuid4().hex,
                title=f"issue {n}",
                culprit="app.py",
                level="error",
                first_seen=_at(rng.randrange(10) * 60),
                last_seen=_at(1000 + rng.randrange(15) * 60),
                event_count=rng.randrange(1, 6),
            )
            for n in range(200)
        )
    return Busy(w, rng, _issue_keys(w))


def _reference(keys: dict[int, tuple[Any, ...]], sort: str, ids: set[int]) -> list[int]:
    """``ids`` in the list's order by ``keys`` (ties by id, as ISSUE_SORTS)."""
    column = {"last_seen": 0, "first_seen": 1, "count": 2, "id": None}[sort.lstrip("-")]
    ordered = sorted(ids, key=lambda i: (i if column is None else keys[i][column], i))
    return ordered[::-1] if sort.startswith("-") else ordered


@pytest.mark.parametrize("sort", SORTS)
def test_a_cursor_walk_matches_the_numbered_pages_when_nothing_changes(busy, sort):
    query = f"sort={sort}&per_page=7"
    by_cursor = cursor_walk(busy.w, busy.path, query)
    assert by_cursor == numbered_walk(busy.w, busy.path, query)
    assert by_cursor == _reference(busy.before, sort, set(busy.before))
    # sort left out: the cursor carries its own.
    first = _ok(_get(busy.w, busy.path, query))
    rest = _ok(_get(busy.w, busy.path, f"per_page=7&cursor={first['next_cursor']}"))
    assert [i["id"] for i in rest["items"]] == by_cursor[7:14]


@pytest.mark.parametrize("sort", SORTS)
def test_a_cursor_walk_sees_every_unchanged_issue_once_while_issues_change(busy, sort):
    walked = cursor_walk(busy.w, busy.path, f"sort={sort}&per_page=20", busy.change)
    assert len(busy.deleted) >= 10 and len(busy.touched) >= 60
    counts = collections.Counter(walked)
    untouched = busy.untouched()
    assert {i for i in untouched if counts[i] != 1} == set()
    # ... in the list's order (their keys did not change).
    assert [i for i in walked if i in untouched] == _reference(busy.before, sort, untouched)
    if sort in ("id", "-id"):
        # Ids never change: every issue there before and after the walk, exactly once,
        # whatever happened to it; the others at most once.
        assert {i for i in set(busy.before) - busy.deleted if counts[i] != 1} == set()
        assert max(counts.values()) == 1
        if sort == "id":  # created during the walk, after every id walked so far
            assert busy.created <= set(walked)


@pytest.mark.parametrize("sort", SORTS)
def test_numbered_pages_repeat_and_skip_issues_in_the_same_walk(busy, sort):
    # The reason for cursors, and the proof that the walk above would catch offsets:
    # the same changes make numbered pages show unchanged issues twice or never.
    walked = numbered_walk(busy.w, busy.path, f"sort={sort}&per_page=20", busy.change)
    counts = collections.Counter(walked)
    wrong = {i for i in busy.untouched() if counts[i] != 1}
    assert len(wrong) >= 3, counts


def test_a_filtered_id_walk_sees_every_issue_that_kept_matching_once(busy):
    # Resolving takes issues out of status=unresolved; the others are each seen once.
    query = "sort=id&per_page=20&status=unresolved"
    walked = cursor_walk(busy.w, busy.path, query, busy.change)
    after = _issue_keys(busy.w)
    kept = {i for i in busy.before if i in after and after[i][3] == "unresolved"}
    counts = collections.Counter(walked)
    assert {i for i in kept if counts[i] != 1} == set()
    assert max(counts.values()) == 1
    assert all(after.get(i, ("",) * 4)[3] != "resolved" or i in busy.touched for i in walked)


@pytest.mark.parametrize("sort", SORTS)
@pytest.mark.parametrize("per_page", [1, 3, 4])
def test_ties_cross_page_edges(ingest_world, sort, per_page):
    # Ten issues share every value; two others differ. Any page edge falls in a tie.
    w = ingest_world
    ids = [add_issue(w.state, w.project_id, f"t{n}", seen=(10, 20), count=3) for n in range(10)]
    ids.append(add_issue(w.state, w.project_id, "older", seen=(5, 15), count=2))
    ids.append(add_issue(w.state, w.project_id, "newer", seen=(15, 25), count=4))
    path = ISSUES.format(p=w.project_id)
    query = f"sort={sort}&per_page={per_page}"
    walked = cursor_walk(w, path, query)
    assert walked == numbered_walk(w, path, query)
    assert walked == _reference(_issue_keys(w), sort, set(ids))


def test_a_numbered_page_hands_on_to_a_cursor_and_the_last_page_has_none(busy):
    w, path = busy.w, busy.path
    third = _ok(_get(w, path, "sort=-count&per_page=30&page=3"))
    assert third["next_cursor"] and third["page"] == 3
    rest = _ok(_get(w, path, f"sort=-count&per_page=200&cursor={third['next_cursor']}"))
    everything = _reference(busy.before, "-count", set(busy.before))
    assert [i["id"] for i in third["items"] + rest["items"]] == everything[60:]
    assert rest["next_cursor"] is None and rest["page"] is None
    # total_count and total_pages stay those of the whole list on a cursor page.
    assert (rest["total_count"], rest["total_pages"]) == (200, 1)
    # A full last page has no cursor (one issue more is read to know).
    assert _ok(_get(w, path, "per_page=50&page=4"))["next_cursor"] is None
    assert _ok(_get(w, path, "per_page=200"))["next_cursor"] is None
    assert _ok(_get(w, path, "per_page=50&page=9"))["next_cursor"] is None


def _issue_row(project_id: int, issue_id: int, at: float, **fields: Any) -> dict[str, Any]:
    event = {
        "event_id": uuid.uuid4().hex,
        "timestamp": _at(at).isoformat(),
        "level": "error",
        "platform": "python",
        "message": "boom",
        **fields,
    }
    ctx = ItemContext(project_id, _at(at + 1), 3650, {})
    row = event_row(event, orjson.dumps(event), event["event_id"], ctx)
    row["issue_id"] = issue_id
    return row


def _insert(w: World, rows: list[dict[str, Any]]) -> None:
    block = b"\n".join(orjson.dumps(row) for row in rows)
    w.state.clickhouse.client().raw_insert("events", insert_block=block, fmt="JSONEachRow")


def test_filters_stay_with_the_cursor(ingest_world):
    w = ingest_world
    path = ISSUES.format(p=w.project_id)
    ids = []
    for n in range(30):
        issue = add_issue(w.state, w.project_id, f"match {n}" if n % 2 else f"other {n}")
        ids.append(issue)
        env = "production" if n % 3 else "staging"
        _insert(w, [_issue_row(w.project_id, issue, n, environment=env)])
    query = "q=MATCH&environment=production&status=unresolved&sort=id&per_page=2"
    walked = cursor_walk(w, path, query)
    assert walked == [i for n, i in enumerate(ids) if n % 2 and n % 3]
    first = _ok(_get(w, path, query))
    assert first["total_count"] == len(walked)
    # A cursor page still counts the whole filtered list.
    second = _ok(_get(w, path, f"{query}&cursor={first['next_cursor']}"))
    assert (second["total_count"], second["total_pages"]) == (len(walked), 5)


def _b64(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


BAD_CURSORS = [
    "",
    "x",
    "!!!!",
    "%C3%A9",  # é
    "a" * 201,
    base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    _b64({"sort": "-last_seen"}),
    _b64([]),
    _b64(["-last_seen", 1, 1, 1]),
    _b64(["nope", 1, 1]),
    _b64([None, 1, 1]),
    _b64(["-last_seen", "1", 1]),
    _b64(["-last_seen", 1.5, 1]),
    _b64(["-last_seen", True, 1]),
    _b64(["-last_seen", 10**20, 1]),
    _b64(["-last_seen", -(10**20), 1]),
    _b64(["-last_seen", 1, 0]),
    _b64(["-last_seen", 1, 2**31]),
    _b64(["-last_seen", 1, 1.0]),
    _b64(["-count", -1, 1]),
    _b64(["-count", 2**63, 1]),
    _b64(["-count", None, 1]),
    _b64(["id", 5, 1]),
    _b64(["id", None, -1]),
    _b64(["-timestamp", 1, "a" * 32, 9]),  # a logs cursor
]


def test_bad_cursors_are_400s_naming_cursor(busy):
    w, path = busy.w, busy.path
    good = _ok(_get(w, path, "per_page=5"))["next_cursor"]
    half = good[: len(good) // 2]
    for bad in [*BAD_CURSORS, half, good[:-1], _b64(["-timestamp", 1, "0" * 32])]:
        resp = _get(w, path, f"cursor={bad}")
        assert resp.status_code == 400, (bad, resp.text)
        assert resp.json["error"]["field"] == "cursor", (bad, resp.json)
    # With page, or with another sort: 400 too.
    for query in (f"cursor={good}&page=1", f"cursor={good}&page=2", f"cursor={good}&sort=-count"):
        resp = _get(w, path, query)
        assert (resp.status_code, resp.json["error"]["field"]) == (400, "cursor"), query
    # An events cursor is no issues cursor, and the other way round.
    issue = next(iter(set(busy.before) - busy.deleted))
    _insert(w, [_issue_row(w.project_id, issue, n) for n in range(3)])
    events = _ok(_get(w, f"/api/projects/{w.project_id}/events", "per_page=1"))["next_cursor"]
    resp = _get(w, path, f"cursor={events}")
    assert (resp.status_code, resp.json["error"]["field"]) == (400, "cursor")
    resp = _get(w, f"/api/projects/{w.project_id}/events", f"cursor={good}")
    assert (resp.status_code, resp.json["error"]["field"]) == (400, "cursor")
    # The sort a cursor was made for is its own: a made-up but well-formed one is a
    # position like any other (nothing after it here).
    made_up = IssueCursor("-count", 0, 1).encode()
    assert _ok(_get(w, path, f"cursor={made_up}"))["items"] == []


def test_bad_event_cursors_are_400s_naming_cursor(ingest_world):
    w = ingest_world
    issue = add_issue(w.state, w.project_id, "e")
    _insert(w, [_issue_row(w.project_id, issue, n) for n in range(5)])
    paths = [f"/api/projects/{w.project_id}/events", f"{ISSUES.format(p=w.project_id)}/{issue}"]
    paths[1] += "/events"
    for path in paths:
        good = _ok(_get(w, path, "per_page=2"))["next_cursor"]
        bad_events = [
            _b64(["-timestamp", 1, "A" * 32]),
            _b64(["-timestamp", 1, "a" * 31]),
            _b64(["-timestamp", 1, str(uuid.UUID("a" * 32))]),
            _b64(["-timestamp", 1, 5]),
            _b64(["-timestamp", "1", "a" * 32]),
            _b64(["-timestamp", -(10**17), "a" * 32]),
            _b64(["timestamp", 1, "a" * 32]),
            _b64(["-last_seen", 1, 1]),
            good[:-2],
        ]
        for bad in BAD_CURSORS + bad_events:
            resp = _get(w, path, f"cursor={bad}")
            assert resp.status_code == 400, (path, bad, resp.text)
            assert resp.json["error"]["field"] == "cursor", (bad, resp.json)
        resp = _get(w, path, f"cursor={good}&page=2")
        assert (resp.status_code, resp.json["error"]["field"]) == (400, "cursor")


def _event_ids(w: World) -> list[str]:
    rows = w.state.clickhouse.query_rows(
        "SELECT event_id FROM events WHERE project_id = {p:UInt64} "
        "ORDER BY timestamp DESC, event_id DESC",
        {"p": w.project_id},
    )
    return [uuid.UUID(str(row[0])).hex for row in rows]


@pytest.mark.parametrize("per_page", [1, 3, 7, 40])
def test_events_sharing_a_timestamp_page_across_edges(ingest_world, per_page):
    # 40 events at one time (ids compared as ClickHouse does: second half first), with
    # a few around them, inserted in three blocks (parts) to walk across.
    w = ingest_world
    issue = add_issue(w.state, w.project_id, "tied")
    rows = [_issue_row(w.project_id, issue, 100) for _ in range(40)]
    rows += [_issue_row(w.project_id, issue, at) for at in (50, 99.999999, 100.000001, 150)]
    for part in (rows[:15], rows[15:30], rows[30:]):
        _insert(w, part)
    reference = _event_ids(w)
    assert len(reference) == 44
    for path in (
        f"/api/projects/{w.project_id}/events",
        f"{ISSUES.format(p=w.project_id)}/{issue}/events",
    ):
        query = f"per_page={per_page}"
        walked = cursor_walk(w, path, query)
        assert walked == reference
        assert numbered_walk(w, path, query) == reference


def test_an_events_walk_sees_every_earlier_event_once_while_events_arrive(ingest_world):
    w = ingest_world
    issues = [add_issue(w.state, w.project_id, f"i{n}") for n in range(4)]
    rng = random.Random(3)
    _insert(
        w, [_issue_row(w.project_id, rng.choice(issues), rng.randrange(60)) for _ in range(200)]
    )
    before = set(_event_ids(w))
    arrived: list[str] = []

    def arrive(pages: int, seen: list[Any]) -> None:
        # New events (newer than every one so far: they go to the head of the list) and
        # a late one dated inside the part not yet walked.
        rows = [_issue_row(w.project_id, rng.choice(issues), 100 + pages) for _ in range(3)]
        rows.append(_issue_row(w.project_id, rng.choice(issues), rng.randrange(60)))
        _insert(w, rows)
        arrived.extend(r["event_id"].replace("-", "") for r in rows)

    path = f"/api/projects/{w.project_id}/events"
    walked = cursor_walk(w, path, "per_page=20", arrive)
    counts = collections.Counter(walked)
    assert {e for e in before if counts[e] != 1} == set() and max(counts.values()) == 1
    issue_path = f"{ISSUES.format(p=w.project_id)}/{issues[0]}/events"
    mine = {e for e in _event_ids(w) if e in before} & {
        item for item in cursor_walk(w, issue_path, "per_page=100")
    }
    walked = cursor_walk(w, issue_path, "per_page=5", arrive)
    counts = collections.Counter(walked)
    assert {e for e in mine if counts[e] != 1} == set() and max(counts.values()) == 1
    # Numbered pages in the same walk show events twice (pushed down by new ones).
    walked = numbered_walk(w, path, "per_page=20", arrive)
    assert max(collections.Counter(walked).values()) > 1


def test_events_filters_stay_with_the_cursor(ingest_world):
    # Real ingest: events of two traces and environments, over three issues.
    w = ingest_world
    start = w.state.clock().timestamp() - 1000
    trace = "a1" * 16
    sent = []
    for n in range(24):
        event = {
            "event_id": uuid.uuid4().hex,
            "timestamp": start + n // 2,  # pairs share a time
            "platform": "python",
            "level": "error",
            "exception": {"values": [{"type": "KeyError", "value": f"k{n % 3}"}]},
            "environment": "production" if n % 4 else "staging",
        }
        if n % 2:
            event["contexts"] = {"trace": {"trace_id": trace, "span_id": "c" * 16}}
        sent.append(event)
    send_events(w, w.project_id, sent)
    path = f"/api/projects/{w.project_id}/events"
    query = f"trace_id={trace}&environment=production&per_page=2"
    walked = cursor_walk(w, path, query)
    expected = {e["event_id"] for n, e in enumerate(sent) if n % 2 and n % 4}
    assert set(walked) == expected and len(walked) == len(expected)
    assert walked == numbered_walk(w, path, query)
    first = _ok(_get(w, path, query))
    second = _ok(_get(w, path, f"{query}&cursor={first['next_cursor']}"))
    assert (second["total_count"], second["page"]) == (len(expected), None)


def test_cursor_pages_read_off_the_sort_s_index_on_sqlite(ingest_world):
    # Both parts of a cursor page (the tie, then the later values) seek on the index
    # the sort has (relational migration 0010); only the few rows found are sorted.
    w = ingest_world
    engine = w.state.engine
    if engine.dialect.name != "sqlite":
        pytest.skip("PostgreSQL plans by statistics, which a small table skews")
    at = _at(0)
    for sort, key in (("-last_seen", at), ("last_seen", at), ("-first_seen", at), ("-count", 3)):
        for statuses in ((), ("unresolved",)):
            where = [Issue.project_id == 1]
            if statuses:
                where.append(Issue.status.in_(statuses))
            statement = read._after(where, IssueCursor(sort, key, 5), 51)
            sql = str(statement.compile(engine, compile_kwargs={"literal_binds": True}))
            with engine.connect() as conn:
                plan = [r[-1] for r in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {sql}")]
            searches = [line for line in plan if line.startswith("SEARCH issues")]
            assert len(searches) == 2, plan
            assert all("USING INDEX ix_issues_project_" in line for line in searches), plan
            assert "=? AND id" in searches[0], plan  # the tie seeks on the id too
            assert not [line for line in plan if line.startswith("SCAN issues")], plan


def test_the_service_refuses_a_cursor_of_another_sort(ingest_world):
    w = ingest_world
    with w.state.sessions() as s, pytest.raises(ValidationError) as caught:
        read.list_issues(
            s,
            w.project_id,
            store=w.state.clickhouse,
            sort="-last_seen",
            page=PageRequest(),
            cursor=IssueCursor("id", None, 1),
        )
    assert caught.value.field == "cursor"
