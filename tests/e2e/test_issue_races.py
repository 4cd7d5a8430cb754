"""Issues changed by people while their events arrive (twenty-fourth session's review of
issue state under concurrency). Each race is made to happen at its exact moment, through
the real stores: the writer's own insert step, or the ORM's own flush."""

from __future__ import annotations

import time
import uuid

import sqlalchemy as sa
from sqlalchemy.orm import Session

from errortrack.api import issues as api_issues
from errortrack.models import ApiToken, Issue
from tests.ingest_support import send_events


def _event(message: str, timestamp: float) -> dict:
    return {"event_id": uuid.uuid4().hex, "message": message, "timestamp": timestamp}


def _project_events(world) -> list[dict]:
    page = world.call("viewer", "GET", f"/api/projects/{world.project_id}/events")
    assert page.status_code == 200, page.text
    return page.json["items"]


def test_events_inserted_after_their_issue_was_deleted_are_deleted_too(ingest_world):
    """The writer counts a batch into an issue, commits, then inserts it into ClickHouse.
    An issue deleted in between kept that batch's events under the deleted id, listed
    by the project's events until their retention ended (120 of 120 in the review)."""
    world = ingest_world
    pid = world.project_id
    send_events(world, pid, [_event("checkout failed", time.time())])
    (issue,) = world.call("viewer", "GET", f"/api/projects/{pid}/issues").json["items"]

    writer = world.state.ingest.writer
    insert = writer.insert

    def delete_then_insert(table: str, data: bytes, token: str) -> None:
        if table == "events":
            gone = world.call("editor", "DELETE", f"/api/projects/{pid}/issues/{issue['id']}")
            assert gone.status_code == 204, gone.text
        insert(table, data, token)

    writer.insert = delete_then_insert
    try:
        send_events(world, pid, [_event("checkout failed", time.time()) for _ in range(3)])
    finally:
        writer.insert = insert
    # The DELETEs are scheduled (lightweight_deletes_sync = 0): give the mutation time.
    deadline = time.monotonic() + 20
    while _project_events(world) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _project_events(world) == []
    assert world.call("viewer", "GET", f"/api/projects/{pid}/issues").json["items"] == []


def test_events_inserted_before_the_delete_commits_are_deleted_by_the_api(
    ingest_world, monkeypatch
):
    """The other order: the batch goes in after the API's first DELETE but before its
    commit, so the writer still finds the issue; the API's DELETE after its commit is
    what removes them (the writer's own check is switched off here to show it)."""
    world = ingest_world
    pid = world.project_id
    send_events(world, pid, [_event("refund failed", time.time())])
    (issue,) = world.call("viewer", "GET", f"/api/projects/{pid}/issues").json["items"]
    writer = world.state.ingest.writer
    monkeypatch.setattr(writer.hooks["events"], "after_insert", lambda token: None)
    insert = writer.insert
    delete = api_issues.service.delete

    def delete_then_let_the_insert_in(*args, **kwargs) -> None:
        delete(*args, **kwargs)
        insert(*pending)

    def insert_during_the_delete(table: str, data: bytes, token: str) -> None:
        if table != "events":
            insert(table, data, token)
            return
        pending[:] = [table, data, token]
        gone = world.call("editor", "DELETE", f"/api/projects/{pid}/issues/{issue['id']}")
        assert gone.status_code == 204, gone.text

    pending: list = []
    monkeypatch.setattr(api_issues.service, "delete", delete_then_let_the_insert_in)
    monkeypatch.setattr(writer, "insert", insert_during_the_delete)
    send_events(world, pid, [_event("refund failed", time.time()) for _ in range(3)])
    deadline = time.monotonic() + 20
    while _project_events(world) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _project_events(world) == []


def test_a_status_change_of_an_issue_deleted_meanwhile_is_a_404(ingest_world):
    """Resolving an issue that a colleague deleted between the resolve's read and its
    write was a 500 (the ORM's UPDATE matched no row: StaleDataError)."""
    world = ingest_world
    pid = world.project_id
    send_events(world, pid, [_event("payment declined", time.time())])
    # Read as the editor first: its token's last-used time is then written, and the
    # resolve below writes nothing before its UPDATE (SQLite would hold its lock).
    (issue,) = world.call("editor", "GET", f"/api/projects/{pid}/issues").json["items"]

    def delete_first(session: Session, _context, _instances) -> None:
        if any(isinstance(obj, Issue) for obj in session.dirty):
            with world.state.engine.begin() as other:
                other.execute(sa.delete(Issue).where(Issue.id == issue["id"]))

    sa.event.listen(Session, "before_flush", delete_first)
    try:
        resp = world.call("editor", "POST", f"/api/projects/{pid}/issues/{issue['id']}/resolve")
    finally:
        sa.event.remove(Session, "before_flush", delete_first)
    assert resp.status_code == 404, resp.text
    assert resp.json["error"]["code"] == "not_found"


def test_first_and_last_seen_are_the_stored_event_time(ingest_world):
    """The grouping hook rounded a float time to the microsecond, ClickHouse cuts it: half
    of all float times made the issue's first and last seen 1 us later than its event."""
    world = ingest_world
    pid = world.project_id
    at = float(int(time.time()) - 60) + 0.1234567  # 7 digits: the 7th decides
    send_events(world, pid, [_event("timed", at)])
    (issue,) = world.call("viewer", "GET", f"/api/projects/{pid}/issues").json["items"]
    (event,) = _project_events(world)
    assert issue["first_seen"] == issue["last_seen"] == event["timestamp"]
    assert event["timestamp"].endswith(".123456Z")


def test_a_token_revoked_while_its_request_runs_is_neither_an_error_nor_revived(ingest_world):
    """The request records its token's last use. Written in the request's transaction
    by the ORM, a token revoked in between made that UPDATE match no row (a 500, then a
    401). It is now written after the request's transaction (db.after_commit): the
    request, authorised when it began, answers as any request in flight does; the
    write finds no row and brings none back; the token's next use is a 401."""
    world = ingest_world
    user_id = world.add_user()
    token = world.add_token(user_id)
    revoked = []

    def revoke_first(_conn, _cursor, statement: str, *_args) -> None:
        if statement.lstrip().upper().startswith("UPDATE API_TOKENS") and not revoked:
            with world.state.engine.begin() as other:
                revoked.append(
                    other.execute(sa.delete(ApiToken).where(ApiToken.user_id == user_id)).rowcount
                )

    sa.event.listen(world.state.engine, "before_cursor_execute", revoke_first)
    try:
        resp = world.client.simulate_get(
            "/api/projects", headers={"Authorization": f"Bearer {token}"}
        )
    finally:
        sa.event.remove(world.state.engine, "before_cursor_execute", revoke_first)
    assert revoked == [1]  # the write of its last use came after the request's own work
    assert resp.status_code == 200, resp.text
    with world.state.engine.connect() as conn:
        left = conn.execute(sa.select(ApiToken).where(ApiToken.user_id == user_id)).all()
    assert left == []
    again = world.client.simulate_get("/api/projects", headers={"Authorization": f"Bearer {token}"})
    assert again.status_code == 401, again.text


def _spool_events(world, pid: int, events: list[dict]) -> None:
    """``send_events`` without the drain: the events wait in the spool."""
    writer = world.state.ingest.writer
    drain, writer.drain = writer.drain, lambda: None
    try:
        send_events(world, pid, events)
    finally:
        writer.drain = drain


def test_a_segment_resent_after_its_issue_was_deleted_brings_no_issue_back(ingest_world):
    """The events went into ClickHouse but the writer did not hear so (a lost answer) and
    kept the segment; the issue was deleted before the retry. The retry, a replay of a
    counted batch, made the issue again with the old count, while ClickHouse dropped its
    rows by their token: an issue counting 3 events and listing none, whose count the
    next event of the error then carried on (review, thirty-second session)."""
    world = ingest_world
    pid = world.project_id
    _spool_events(world, pid, [_event("stock sync failed", time.time()) for _ in range(3)])
    writer = world.state.ingest.writer
    insert = writer.insert
    lost: list[str] = []

    def answer_lost(table: str, data: bytes, token: str) -> None:
        insert(table, data, token)
        if table == "events" and not lost:
            lost.append(token)
            raise ConnectionError("the answer was lost")

    writer.insert = answer_lost
    try:
        writer.drain()
    except ConnectionError:
        pass
    finally:
        writer.insert = insert
    assert lost
    (issue,) = world.call("viewer", "GET", f"/api/projects/{pid}/issues").json["items"]
    assert issue["count"] == 3
    gone = world.call("editor", "DELETE", f"/api/projects/{pid}/issues/{issue['id']}")
    assert gone.status_code == 204, gone.text
    writer.drain()  # the retry
    assert world.call("viewer", "GET", f"/api/projects/{pid}/issues").json["items"] == []
    # The error happens again: a new issue, counting only what it lists.
    send_events(world, pid, [_event("stock sync failed", time.time())])
    (again,) = world.call("viewer", "GET", f"/api/projects/{pid}/issues").json["items"]
    listed = world.call("viewer", "GET", f"/api/projects/{pid}/issues/{again['id']}/events")
    assert again["count"] == len(listed.json["items"]) == 1


def test_a_segment_replayed_after_a_crash_and_its_issue_deleted_brings_no_issue_back(
    ingest_world,
):
    """The same after a crash between a segment's insert and its deletion: the replay
    at the next start found the issue gone."""
    world = ingest_world
    pid = world.project_id
    _spool_events(world, pid, [_event("invoice render failed", time.time()) for _ in range(2)])
    writer = world.state.ingest.writer
    writer.spool.seal()
    path = writer.spool.next_sealed(0)
    assert path is not None and writer.write_segment(path)  # in; "crash" before done()
    (issue,) = world.call("viewer", "GET", f"/api/projects/{pid}/issues").json["items"]
    gone = world.call("editor", "DELETE", f"/api/projects/{pid}/issues/{issue['id']}")
    assert gone.status_code == 204, gone.text
    writer.drain()  # the replay
    assert world.call("viewer", "GET", f"/api/projects/{pid}/issues").json["items"] == []
    # The issue's DELETE of its stored events is scheduled (lightweight_deletes_sync = 0):
    # give the mutation time, as above.
    deadline = time.monotonic() + 20
    while _project_events(world) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _project_events(world) == []
