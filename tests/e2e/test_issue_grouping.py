"""The writer's grouping hook and the issue services on the real relational store (and
chDB for deleting events)."""

import datetime as dt

import orjson
import pytest
import sqlalchemy as sa

from errortrack import db
from errortrack.errors import NotFound, ValidationError
from errortrack.ingest.items import ItemContext
from errortrack.issues import service
from errortrack.issues.events import handle_event
from errortrack.issues.grouping import GroupingHook
from errortrack.models import GroupedBatch, Issue, Project
from errortrack.projects.service import create_project

T0 = dt.datetime(2026, 11, 1, 12, 0, tzinfo=dt.UTC)


@pytest.fixture
def sessions(engine):
    return db.make_sessionmaker(engine)


@pytest.fixture
def project_id(sessions):
    with db.unit_of_work(sessions) as session:
        return create_project(session, name="shop").id


@pytest.fixture
def hook(sessions, clock):
    return GroupingHook(sessions, clock=clock)


def event_rows(project_id, *specs):
    """Rows as the event handler builds them; spec = (exception type, seconds after T0)."""
    rows = []
    for type_, offset in specs:
        event = {
            "exception": {
                "values": [
                    {
                        "type": type_,
                        "value": "boom",
                        "stacktrace": {
                            "frames": [{"module": "app", "function": "f", "in_app": True}]
                        },
                    }
                ]
            },
            "timestamp": (T0 + dt.timedelta(seconds=offset)).timestamp(),
        }
        ctx = ItemContext(project_id, T0 + dt.timedelta(seconds=offset), 30, {})
        rows.extend(handle_event(orjson.dumps(event), {}, ctx).events)
    return rows


def issues(sessions):
    with db.unit_of_work(sessions) as session:
        return {i.title: i for i in session.scalars(sa.select(Issue))}


def count_updates(engine):
    statements = []
    sa.event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    return lambda: sum(1 for s in statements if s.lstrip().upper().startswith("UPDATE"))


def test_batch_creates_one_issue_per_fingerprint_and_counts_with_one_update(
    hook, sessions, engine, project_id
):
    rows = event_rows(
        project_id, ("KeyError", 5), ("KeyError", 1), ("ValueError", 2), ("KeyError", 3)
    )
    updates = count_updates(engine)
    out = hook(rows, "seg-1:0")
    assert updates() == 1  # one executemany UPDATE for the batch, not one per event
    found = issues(sessions)
    key_error, value_error = found["KeyError: boom"], found["ValueError: boom"]
    assert (key_error.event_count, value_error.event_count) == (3, 1)
    assert key_error.first_seen == T0 + dt.timedelta(seconds=1)
    assert key_error.last_seen == T0 + dt.timedelta(seconds=5)
    assert (key_error.status, key_error.culprit, key_error.level) == (
        "unresolved",
        "app in f",
        "error",
    )
    assert [r["issue_id"] for r in out] == [
        key_error.id,
        key_error.id,
        value_error.id,
        key_error.id,
    ]


def test_replayed_batch_token_is_not_counted_twice(hook, sessions, project_id, clock):
    rows = event_rows(project_id, ("KeyError", 1), ("KeyError", 2))
    first = [r["issue_id"] for r in hook([dict(r) for r in rows], "seg-1:0")]
    # A fresh hook (a restarted server) replays the same batch: same ids, same counts.
    replay = GroupingHook(hook.sessions, clock=clock)
    again = [r["issue_id"] for r in replay([dict(r) for r in rows], "seg-1:0")]
    assert first == again
    assert issues(sessions)["KeyError: boom"].event_count == 2
    hook(event_rows(project_id, ("KeyError", 9)), "seg-2:0")
    found = issues(sessions)["KeyError: boom"]
    assert found.event_count == 3 and found.last_seen == T0 + dt.timedelta(seconds=9)
    with db.unit_of_work(sessions) as session:
        assert set(session.scalars(sa.select(GroupedBatch.token))) == {"seg-1:0", "seg-2:0"}


def test_an_event_id_seen_before_is_dropped_and_not_counted(sessions, clock, clickhouse):
    with db.unit_of_work(sessions) as session:
        shop, blog = (create_project(session, name=n).id for n in ("shop", "blog"))
    hook = GroupingHook(sessions, store=clickhouse, clock=clock)
    first, second = event_rows(shop, ("KeyError", 1), ("KeyError", 2))
    # A repeat within one batch is dropped before counting.
    out = hook([first, dict(first), second], "b1")
    assert [r["event_id"] for r in out] == [first["event_id"], second["event_id"]]
    assert issues(sessions)["KeyError: boom"].event_count == 2
    body = b"\n".join(orjson.dumps(r) for r in out)
    clickhouse.client().raw_insert("events", insert_block=body, fmt="JSONEachRow")
    # In a later batch it is found in ClickHouse; a new event of the issue still counts,
    # and the same id in another project is another event.
    new = event_rows(shop, ("KeyError", 3))[0]
    elsewhere = {**event_rows(blog, ("KeyError", 4))[0], "event_id": first["event_id"]}
    out = hook([dict(first), new, elsewhere], "b2")
    assert [(r["project_id"], r["event_id"]) for r in out] == [
        (shop, new["event_id"]),
        (blog, first["event_id"]),
    ]
    with db.unit_of_work(sessions) as session:
        counts = {(i.project_id, i.title): i.event_count for i in session.scalars(sa.select(Issue))}
    assert counts == {(shop, "KeyError: boom"): 3, (blog, "KeyError: boom"): 1}


def test_a_batch_of_stored_events_only_counts_nothing(sessions, clock, clickhouse, project_id):
    """A segment replayed after its insert: every row is found, nothing changes."""
    hook = GroupingHook(sessions, store=clickhouse, clock=clock)
    out = hook(event_rows(project_id, ("KeyError", 1), ("ValueError", 2)), "b1")
    body = b"\n".join(orjson.dumps(r) for r in out)
    clickhouse.client().raw_insert("events", insert_block=body, fmt="JSONEachRow")
    assert hook([dict(r) for r in out], "b2") == []
    assert {t: i.event_count for t, i in issues(sessions).items()} == {
        "KeyError: boom": 1,
        "ValueError: boom": 1,
    }


def test_cached_lookup_reads_no_issue_rows(hook, engine, project_id):
    hook(event_rows(project_id, ("KeyError", 1)), "b1")
    statements = []
    sa.event.listen(engine, "before_cursor_execute", lambda *a: statements.append(a[2]))
    hook(event_rows(project_id, ("KeyError", 2), ("KeyError", 3)), "b2")
    assert not [s for s in statements if s.lstrip().upper().startswith("SELECT")]


def test_new_event_reopens_a_resolved_issue_but_not_a_muted_one(hook, sessions, project_id):
    hook(event_rows(project_id, ("KeyError", 1), ("ValueError", 1)), "b1")
    found = issues(sessions)
    with db.unit_of_work(sessions) as session:
        # Resolved between the two batches' events (T0 is in the past: resolving now
        # would make the second batch's events older than the resolution).
        resolved = service.resolve(
            session, project_id=project_id, issue_id=found["KeyError: boom"].id, now=T0
        )
        assert resolved["status"] == "resolved"
        service.mute(session, project_id=project_id, issue_id=found["ValueError: boom"].id)
    assert issues(sessions)["KeyError: boom"].status == "resolved"
    hook(event_rows(project_id, ("KeyError", 2), ("ValueError", 2)), "b2")
    after = issues(sessions)
    assert (after["KeyError: boom"].status, after["KeyError: boom"].event_count) == (
        "unresolved",
        2,
    )
    assert (after["ValueError: boom"].status, after["ValueError: boom"].event_count) == ("muted", 2)


def test_deleted_issue_is_created_again_even_when_cached(hook, sessions, project_id, clickhouse):
    [row] = hook(event_rows(project_id, ("KeyError", 1)), "b1")
    with db.unit_of_work(sessions) as session:
        service.delete(session, clickhouse, project_id=project_id, issue_id=row["issue_id"])
    # ValueError is new and, on SQLite, takes the deleted issue's id: KeyError's cached
    # id must not count into it.
    out = hook(event_rows(project_id, ("ValueError", 2), ("KeyError", 2)), "b2")
    found = issues(sessions)
    assert [r["issue_id"] for r in out] == [
        found["ValueError: boom"].id,
        found["KeyError: boom"].id,
    ]
    assert found["KeyError: boom"].event_count == found["ValueError: boom"].event_count == 1


def test_rows_of_a_deleted_project_are_dropped(hook, sessions, project_id):
    with db.unit_of_work(sessions) as session:
        other = create_project(session, name="gone").id
    rows = event_rows(project_id, ("KeyError", 1)) + event_rows(other, ("KeyError", 1))
    with db.unit_of_work(sessions) as session:
        session.execute(sa.delete(Project).where(Project.id == other))
    out = hook(rows, "b1")
    assert [r["project_id"] for r in out] == [project_id]


def test_same_fingerprint_in_two_projects_is_two_issues(hook, sessions, project_id):
    with db.unit_of_work(sessions) as session:
        other = create_project(session, name="other").id
    out = hook(event_rows(project_id, ("KeyError", 1)) + event_rows(other, ("KeyError", 1)), "b1")
    assert out[0]["issue_id"] != out[1]["issue_id"]


def test_status_services_refuse_unknown_status_and_other_projects(hook, sessions, project_id):
    [row] = hook(event_rows(project_id, ("KeyError", 1)), "b1")
    with db.unit_of_work(sessions) as session:
        with pytest.raises(ValidationError) as exc:
            service.set_status(
                session, project_id=project_id, issue_id=row["issue_id"], status="done"
            )
        assert exc.value.field == "status"
        with pytest.raises(NotFound):
            service.resolve(session, project_id=project_id + 1, issue_id=row["issue_id"])
        assert (
            service.unresolve(session, project_id=project_id, issue_id=row["issue_id"])["status"]
            == "unresolved"
        )


def test_delete_removes_the_issue_and_only_its_events(hook, sessions, project_id, clickhouse):
    rows = hook(event_rows(project_id, ("KeyError", 1), ("KeyError", 2), ("ValueError", 3)), "b1")
    body = b"\n".join(orjson.dumps(r) for r in rows)
    clickhouse.client().raw_insert("events", insert_block=body, fmt="JSONEachRow")
    doomed = rows[0]["issue_id"]
    with db.unit_of_work(sessions) as session:
        service.delete(session, clickhouse, project_id=project_id, issue_id=doomed)
    left = clickhouse.query_rows("SELECT issue_id, count() FROM events GROUP BY issue_id")
    assert left == [(rows[2]["issue_id"], 1)]
    assert set(issues(sessions)) == {"ValueError: boom"}
    with db.unit_of_work(sessions) as session, pytest.raises(NotFound):
        service.delete(session, clickhouse, project_id=project_id, issue_id=doomed)


def test_no_relational_lock_is_held_while_clickhouse_deletes_the_events(
    hook, sessions, project_id, clickhouse, monkeypatch
):
    """The ClickHouse DELETE goes first: it took ~19 s on a big events table, and the
    issue's relational delete, flushed before it, held SQLite's write lock (and on
    PostgreSQL the row's lock) all along, stalling every other writer."""
    [row] = hook(event_rows(project_id, ("KeyError", 1)), "b1")
    doomed = row["issue_id"]
    real = clickhouse.command
    written: list[str] = []

    def command(sql, *args, **kwargs):
        if sql.startswith("DELETE"):
            # Another writer, meanwhile, touching the very issue: it must not wait.
            with sessions() as other:
                if other.get_bind().dialect.name == "sqlite":
                    other.execute(sa.text("PRAGMA busy_timeout = 200"))
                else:
                    other.execute(sa.text("SET lock_timeout = '200ms'"))
                other.execute(sa.update(Issue).where(Issue.id == doomed).values(title="renamed"))
                other.commit()
                written.append("renamed")
        return real(sql, *args, **kwargs)

    monkeypatch.setattr(clickhouse, "command", command)
    with db.unit_of_work(sessions) as session:
        service.delete(session, clickhouse, project_id=project_id, issue_id=doomed)
    assert written == ["renamed"]
    assert set(issues(sessions)) == set()
    assert clickhouse.query_rows(f"SELECT count() FROM events WHERE issue_id = {doomed}") == [(0,)]


def test_a_new_issue_is_named_after_its_newest_event(hook, sessions, project_id):
    # As every later event that is the newest renames it (tests/unit/test_issue_lifecycle.py).
    rows = event_rows(project_id, ("KeyError", 5), ("KeyError", 1))
    rows[0]["title"], rows[1]["title"] = "KeyError: newest", "KeyError: earlier"
    hook(rows, "b1")
    assert set(issues(sessions)) == {"KeyError: newest"}


def test_old_batch_tokens_are_pruned(sessions, clock, project_id):
    hook = GroupingHook(sessions, clock=clock, prune_every=2)
    hook(event_rows(project_id, ("KeyError", 1)), "old")
    clock.advance(days=8)
    hook(event_rows(project_id, ("KeyError", 2)), "new")
    with db.unit_of_work(sessions) as session:
        assert set(session.scalars(sa.select(GroupedBatch.token))) == {"new"}
    assert issues(sessions)["KeyError: boom"].event_count == 2


def _word(n: int) -> str:
    import string

    out = ""
    while True:
        n, r = divmod(n, 26)
        out += string.ascii_lowercase[r]
        if not n:
            return out


def test_a_batch_of_more_issues_than_a_statement_can_bind_is_grouped(state, project, clickhouse):
    """A writer batch of 70,000 new issues (one envelope of 70,000 events then; since the
    thirtieth session an envelope holds one event, but ERRORTRACK_WRITER_BATCH_ROWS may
    be set past 65,535) made the grouping look its fingerprints up with one bound
    parameter each: PostgreSQL takes at most 65,535, the hook failed on every retry, and
    the writer, which takes the oldest segment first, stopped all ingest behind it
    (review, twenty-seventh session). The hook is given the batch as the writer would."""
    pid, _ = project
    n = 70_000
    ctx = ItemContext(pid, T0, 30, {})
    rows = []
    for i in range(n):  # digits would be normalised away: one issue per distinct word
        payload = orjson.dumps({"message": f"failure {_word(i)}", "timestamp": T0.timestamp()})
        rows.extend(handle_event(payload, {}, ctx).events)
    kept = GroupingHook(state.sessions, store=clickhouse, clock=state.clock)(rows, "big")
    assert len(kept) == n and len({r["issue_id"] for r in kept}) == n
    with state.sessions() as session:
        issues = session.scalar(
            sa.select(sa.func.count()).select_from(Issue).where(Issue.project_id == pid)
        )
    assert issues == n
