"""Reading issues (relational) and their events (ClickHouse) for the management API and MCP.

Status changes and deletion live in ``errortrack.issues.service``; this module only reads.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import InstrumentedAttribute, QueryableAttribute, Session, aliased

from errortrack import db, paging
from errortrack.analytics import ClickHouse
from errortrack.errors import NotFound, ValidationError
from errortrack.issues.cursor import EventCursor, IssueCursor
from errortrack.logs.query import ch_time, iso_utc, stored_json
from errortrack.models import ISSUE_STATUSES, Issue
from errortrack.paging import PageRequest, page_body, parse_choices, within_budget

# Each sort of the issues list: the column it orders by before the id (None: the id
# alone) and whether it is descending. Every order ends on the id, so that pages never
# overlap when the values are equal and a page's last issue is a keyset cursor
# (``errortrack.issues.cursor``). The id sorts are the exact walk: an issue's id never
# changes, its last_seen, first_seen (an SDK's buffered events) and count do.
_SORT_KEYS: dict[str, tuple[InstrumentedAttribute[Any] | None, bool]] = {
    "-last_seen": (Issue.last_seen, True),
    "last_seen": (Issue.last_seen, False),
    "-first_seen": (Issue.first_seen, True),
    "-count": (Issue.event_count, True),
    "id": (None, False),
    "-id": (None, True),
}


def _order(
    key: QueryableAttribute[Any] | None, issue_id: QueryableAttribute[int], descending: bool
) -> tuple[sa.ColumnElement[Any], ...]:
    columns = (issue_id,) if key is None else (key, issue_id)
    return tuple(column.desc() if descending else column.asc() for column in columns)


ISSUE_SORTS: dict[str, tuple[sa.ColumnElement[Any], ...]] = {
    sort: _order(key, Issue.id, descending) for sort, (key, descending) in _SORT_KEYS.items()
}
EVENT_COLUMNS = (
    "event_id, issue_id, timestamp, received_at, level, platform, release, environment, "
    "title, culprit, trace_id, span_id"
)
# An issue's events, in the events list's order (newest first, ties by id): the table's
# key (project_id, issue_id, timestamp) is read from its end.
_PROJECT_EVENTS = "project_id = {project_id:UInt64}"
_ISSUE_EVENTS = f"{_PROJECT_EVENTS} AND issue_id = {{issue_id:UInt64}}"
_NEWEST_FIRST = "timestamp DESC, event_id DESC"
# Where the sort key is in a row of EVENT_COLUMNS.
_ID, _TIMESTAMP = 0, 2
_WITH_PAYLOAD = f"{EVENT_COLUMNS}, payload"


def _budgeted(select: str) -> str:
    return paging.budgeted(select, _WITH_PAYLOAD, ("payload",), _NEWEST_FIRST)


# The events after a cursor in that order, spelled with a plain range first, which the
# table's key (and its partitions by day) narrow. Both the ORDER BY and this ``<``
# compare event ids in ClickHouse, which orders a UUID by its second 64 bits first (not
# as Python does): they agree with each other, and nothing here sorts ids in Python.
_EVENTS_AFTER = (
    "(timestamp <= {c_time:DateTime64(6, 'UTC')} "
    "AND (timestamp < {c_time:DateTime64(6, 'UTC')} OR event_id < {c_id:UUID}))"
)


# Sentry's event levels, as ingest stores an issue's level (``summary.level``: lower
# case, these aliases folded); a level outside them is stored as sent and not selectable.
ISSUE_LEVELS = ("fatal", "error", "warning", "info", "debug")
_LEVEL_ALIASES = {"warn": "warning", "critical": "fatal", "log": "info"}
MAX_TEXT = 500
# environment and release values: how many one filter may name, and how long each is.
MAX_VALUES = 100
MAX_VALUE_LENGTH = 1000
_EVENT_ID = re.compile(
    r"[0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.IGNORECASE
)
_ASCII_UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_ASCII_LOWER = str.maketrans(_ASCII_UPPER, _ASCII_UPPER.lower())


def parse_statuses(raw: Iterable[str]) -> tuple[str, ...]:
    """``status=resolved&status=muted`` or ``status=resolved,muted``."""
    return parse_choices(raw, ISSUE_STATUSES, field="status")


def parse_levels(raw: Iterable[str]) -> tuple[str, ...]:
    """``level=error&level=fatal`` or ``level=error,fatal``; ``warn`` is ``warning``."""
    return parse_choices(raw, ISSUE_LEVELS, field="level", aliases=_LEVEL_ALIASES)


def parse_text(raw: str) -> str | None:
    """The ``q`` search text; blank is no filter. NUL is refused: PostgreSQL text
    cannot hold it (the query would fail there, a 500, and pass on SQLite)."""
    if "\x00" in raw:
        raise ValidationError("q may not contain NUL characters", field="q")
    value = raw.strip()
    if len(value) > MAX_TEXT:
        raise ValidationError(f"q must be at most {MAX_TEXT} characters", field="q")
    return value or None


def parse_values(raw: Iterable[str], *, field: str) -> tuple[str, ...]:
    """``environment=a&environment=b`` or ``environment=a,b``: exact values, trimmed,
    order kept, no repeats; an empty one (``a,,b``) is a 400 naming ``field``."""
    # A dict: order kept, and a repeat found without a scan of the values before it
    # (a list made 4,000 values cost 77 ms; DoS review, thirtieth session).
    found: dict[str, None] = {}
    for chunk in raw:
        for part in chunk.split(","):
            value = part.strip()
            if not value:
                raise ValidationError(f"{field} values may not be empty", field=field)
            if len(value) > MAX_VALUE_LENGTH:
                raise ValidationError(
                    f"{field} values must be at most {MAX_VALUE_LENGTH} characters", field=field
                )
            found[value] = None
            if len(found) > MAX_VALUES:
                raise ValidationError(f"{field}: at most {MAX_VALUES} values", field=field)
    return tuple(found)


def parse_event_id(raw: str) -> str:
    """32 hex digits or a UUID with dashes, any case -> the UUID text ClickHouse compares."""
    value = raw.strip()
    if not _EVENT_ID.fullmatch(value):
        raise ValidationError(
            "event_id must be 32 hexadecimal characters or a UUID", field="event_id"
        )
    return str(uuid.UUID(value))


def issue_item(issue: Issue) -> dict[str, Any]:
    """The issue as the relational store holds it (a status change answers this)."""
    return {
        "id": issue.id,
        "project_id": issue.project_id,
        "title": issue.title,
        "culprit": issue.culprit,
        "level": issue.level,
        "status": issue.status,
        "count": issue.event_count,
        "first_seen": iso_utc(issue.first_seen),
        "last_seen": iso_utc(issue.last_seen),
        "fingerprint": issue.fingerprint,
    }


def issue_with_users(store: ClickHouse, issue: Issue) -> dict[str, Any]:
    """One issue's item as lists give it: ``issue_item`` plus its ``user_count``."""
    counts = user_counts(store, issue.project_id, [issue.id])
    return {**issue_item(issue), "user_count": counts.get(issue.id, 0)}


def user_counts(store: ClickHouse, project_id: int, issue_ids: Sequence[int]) -> dict[int, int]:
    """Users affected per issue: the distinct non-empty ``user_key`` among each issue's
    STORED events (ingest's ``events.user_key``), so retention and deletes lower it; an
    issue without such events is absent (0). One query for all of ``issue_ids`` (a
    page's), reading the project's key range for those ids and the one column.

    ``uniq``, as Sentry counts an issue's users: exact up to 65,536 users per issue but
    for collisions of its 32-bit hashes (a thousand users count as 999 about once in
    10,000 issues; 65,000 read as 64,999), an estimate past that (100,000 as 99,993),
    its state bounded (65,536 hashes of 4 bytes per issue). ``uniqExact`` keeps 16 bytes
    per distinct user, without bound, and cost 3-4x as much on an issue of 100,000
    users and 1 M events (105-130 against 33-35 ms, chDB, 2 cores); pages of small
    issues took 5-6 ms either way."""
    if not issue_ids:
        return {}
    rows = store.query_rows(
        "SELECT issue_id, uniq(user_key) FROM events "
        "WHERE project_id = {project_id:UInt64} AND issue_id IN {issue_ids:Array(UInt64)} "
        "AND user_key != '' GROUP BY issue_id",
        {"project_id": project_id, "issue_ids": list(issue_ids)},
    )
    return {int(issue_id): int(users) for issue_id, users in rows}


def list_issues(
    session: Session,
    project_id: int,
    *,
    store: ClickHouse,
    statuses: tuple[str, ...] = (),
    levels: tuple[str, ...] = (),
    text: str | None = None,
    environments: tuple[str, ...] = (),
    releases: tuple[str, ...] = (),
    sort: str = "-last_seen",
    page: PageRequest,
    cursor: IssueCursor | None = None,
) -> dict[str, Any]:
    """A project's issues, most recently seen first by default; all statuses unless asked.
    With ``cursor`` (the ``next_cursor`` of an earlier page of this sort), the
    ``page.per_page`` issues after it instead of a numbered page; ``total_count`` is
    still that of the whole filtered list.

    Filters combine with AND. ``text``: a substring of the title or the culprit, ASCII
    case folded on both relational stores alike. ``environments``/``releases``: issues
    with at least one stored event in one of those environments and (both given) one of
    those releases, which ClickHouse's ``events`` table knows (``store``). Each item
    carries its ``user_count`` (``user_counts``: one query for the page's ids), over all
    the issue's stored events whatever the filters, as ``count`` is."""
    if sort not in ISSUE_SORTS:
        raise ValidationError(f"sort must be one of {', '.join(ISSUE_SORTS)}", field="sort")
    if cursor is not None and cursor.sort != sort:
        raise ValidationError(
            f"this cursor continues sort={cursor.sort}, not sort={sort}", field="cursor"
        )
    where: list[sa.ColumnElement[bool]] = [Issue.project_id == project_id]
    if statuses:
        where.append(Issue.status.in_(statuses))
    if levels:
        where.append(Issue.level.in_(levels))
    if text:
        pattern = text.translate(_ASCII_LOWER)
        where.append(
            sa.or_(
                _holds(session, _ascii_lower(session, Issue.title), pattern),
                _holds(session, _ascii_lower(session, Issue.culprit), pattern),
            )
        )
    if environments or releases:
        ids = issue_ids_with_events(store, project_id, environments, releases)
        if not ids:
            return _issues_body(store, project_id, sort, [], 0, page, cursor)
        where.append(_id_in(session, ids))
    total = session.scalar(sa.select(sa.func.count()).select_from(Issue).where(*where)) or 0
    # One issue more than the page, to know whether any follows it (next_cursor).
    limit = page.per_page + 1
    issues: Sequence[Issue] = []
    if cursor is not None:
        issues = session.scalars(_after(where, cursor, limit)).all()
    elif not page.past_end(total):
        issues = session.scalars(
            sa.select(Issue)
            .where(*where)
            .order_by(*ISSUE_SORTS[sort])
            .limit(limit)
            .offset(page.offset)
        ).all()
    return _issues_body(store, project_id, sort, issues, total, page, cursor)


def _issues_body(
    store: ClickHouse,
    project_id: int,
    sort: str,
    issues: Sequence[Issue],
    total: int,
    page: PageRequest,
    cursor: IssueCursor | None,
) -> dict[str, Any]:
    """The page body of ``issues`` (read with one more than the page), ``next_cursor``
    after its last issue when more follow, ``page`` null on a page asked for by cursor."""
    shown = issues[: page.per_page]
    users = user_counts(store, project_id, [issue.id for issue in shown])
    items = [{**issue_item(issue), "user_count": users.get(issue.id, 0)} for issue in shown]
    body = page_body(items, total, page)
    if cursor is not None:
        body["page"] = None
    body["next_cursor"] = None
    if len(issues) > page.per_page and shown:
        last = shown[-1]
        key, _ = _SORT_KEYS[sort]
        value = None if key is None else getattr(last, key.key)
        body["next_cursor"] = IssueCursor(sort, value, last.id).encode()
    return body


def _after(
    where: list[sa.ColumnElement[bool]], cursor: IssueCursor, limit: int
) -> sa.Select[Issue]:
    """The first ``limit`` issues of ``where`` after ``cursor`` in its sort.

    An id sort is one range of the id. The others are "the same value, a later id" and
    then "a later value", each its own part of the statement: one row-value comparison,
    ``(last_seen, id) < (:v, :id)``, seeks on PostgreSQL, but SQLite's planner uses only
    its first column on these indexes (their id is the rowid) and so stepped over every
    issue sharing the value before the cursor (10 ms a page 80,000 issues into
    ``count = 1`` at 100,000 issues, growing with the depth). Each part here is a seek
    on the sort's index (relational migration 0010) that stops after ``limit`` rows, and
    only those (at most twice the page) are sorted: 0.4 ms on SQLite, 0.8 on PostgreSQL,
    at any depth."""
    key, descending = _SORT_KEYS[cursor.sort]
    order = ISSUE_SORTS[cursor.sort]

    def beyond(column: QueryableAttribute[Any], value: Any) -> sa.ColumnElement[bool]:
        return column < value if descending else column > value

    later_id = beyond(Issue.id, cursor.id)
    if key is None:
        return sa.select(Issue).where(*where, later_id).order_by(*order).limit(limit)
    tied = sa.select(Issue).where(*where, key == cursor.key, later_id)
    later = sa.select(Issue).where(*where, beyond(key, cursor.key))
    parts = [part.order_by(*order).limit(limit).subquery().select() for part in (tied, later)]
    both = aliased(Issue, sa.union_all(*parts).subquery())
    by = _order(getattr(both, key.key), both.id, descending)
    return sa.select(both).order_by(*by).limit(limit)


def issue_ids_with_events(
    store: ClickHouse,
    project_id: int,
    environments: Sequence[str] = (),
    releases: Sequence[str] = (),
) -> list[int]:
    """The ids of the project's issues having an event in one of ``environments`` (any
    when empty) and one of ``releases`` (any when empty), in id order. Reads the
    project's part of the table's key (project_id, issue_id, ...) and these columns."""
    where, params = _event_filter(
        "project_id = {project_id:UInt64} AND issue_id BETWEEN 1 AND {max_id:UInt64}",
        {"project_id": project_id, "max_id": db.MAX_ID},
        environments,
        releases,
    )
    rows = store.query_rows(
        f"SELECT DISTINCT issue_id FROM events WHERE {where} ORDER BY issue_id", params
    )
    return [int(row[0]) for row in rows]


def _id_in(session: Session, ids: Sequence[int]) -> sa.ColumnElement[bool]:
    """``Issue.id`` is one of ``ids``, sent as ONE bound value however many there are.
    An IN list binds one parameter per id: past 65,535 psycopg refuses the statement
    (a 500 for a filter matching that many issues), SQLite's limit is a build option
    (32,766 upstream, 250,000 in Debian's), and the statement is compiled anew for each
    length. PostgreSQL takes an array (``= ANY``), SQLite a JSON array (``json_each``)."""
    if session.get_bind().dialect.name == "postgresql":
        array = sa.bindparam("issue_ids", list(ids), type_=postgresql.ARRAY(sa.Integer()))
        return Issue.id == sa.any_(array)
    each = sa.func.json_each(
        sa.bindparam("issue_ids", orjson.dumps(list(ids)).decode(), type_=sa.String())
    ).table_valued("value")
    return Issue.id.in_(sa.select(each.c.value))


def _holds(session: Session, text: sa.ColumnElement[str], part: str) -> sa.ColumnElement[bool]:
    """Whether ``text`` holds ``part`` as it is (no wildcards): instr() on SQLite,
    strpos() on PostgreSQL. LIKE '%part%' compared character by character from every
    place the part's first character occurs: titles and culprits of 200 "a" and a q of
    199 "a" and a "b" took 1.3 s a search at 20,000 issues on SQLite, against 22 ms for
    another q of that length (API review, twenty-ninth session)."""
    find = sa.func.strpos if session.get_bind().dialect.name == "postgresql" else sa.func.instr
    return find(text, sa.literal(part, sa.String())) > 0


def _ascii_lower(
    session: Session, column: sa.ColumnExpressionArgument[str]
) -> sa.ColumnElement[str]:
    """``column`` with A-Z folded to a-z and nothing else, on either store: SQLite's
    lower() folds ASCII only, PostgreSQL's follows the database's locale (so "É" would
    find "é" there and not on SQLite); in the "C" collation it folds ASCII only too.
    (translate() did the same at 20x the cost: 0.9-1.9 s a search at 100,000 issues,
    against 46 ms; review, twentieth session.)"""
    if session.get_bind().dialect.name == "postgresql":
        return sa.func.lower(sa.collate(column, "C"))
    return sa.func.lower(column)


def _event_filter(
    where: str,
    params: dict[str, Any],
    environments: Sequence[str],
    releases: Sequence[str],
) -> tuple[str, dict[str, Any]]:
    """``where`` and ``params`` narrowed to events in one of ``environments`` and one of
    ``releases`` (either empty: no condition on it)."""
    params = dict(params)
    if environments:
        where += " AND environment IN {environments:Array(String)}"
        params["environments"] = list(environments)
    if releases:
        where += " AND release IN {releases:Array(String)}"
        params["releases"] = list(releases)
    return where, params


def issue_events(
    store: ClickHouse,
    project_id: int,
    issue_id: int,
    page: PageRequest,
    *,
    environments: Sequence[str] = (),
    releases: Sequence[str] = (),
    cursor: EventCursor | None = None,
) -> dict[str, Any]:
    """An issue's events, newest first, each with the payload as the SDK sent it; only
    those in one of ``environments`` and one of ``releases`` when given; with ``cursor``,
    the ``page.per_page`` events after it (``_events_page``)."""
    where, params = _event_filter(
        _ISSUE_EVENTS, {"project_id": project_id, "issue_id": issue_id}, environments, releases
    )
    return _events_page(store, where, params, page, cursor)


def project_events(
    store: ClickHouse,
    project_id: int,
    page: PageRequest,
    *,
    trace_id: str | None = None,
    environments: Sequence[str] = (),
    releases: Sequence[str] = (),
    cursor: EventCursor | None = None,
) -> dict[str, Any]:
    """A project's events of every issue, newest first, with payloads: all of them, or
    those of one trace (``trace_id`` as ``parse_trace_id`` gives it; the table's bloom
    filter on ``trace_id`` skips the other granules), in one of ``environments`` and one
    of ``releases`` when given. The trace view shows a trace's first 100 events; this
    pages through all of them."""
    params: dict[str, Any] = {"project_id": project_id}
    where = _PROJECT_EVENTS
    if trace_id:
        where += " AND trace_id = {trace_id:String}"
        params["trace_id"] = trace_id
    where, params = _event_filter(where, params, environments, releases)
    return _events_page(store, where, params, page, cursor)


def _events_page(
    store: ClickHouse,
    where: str,
    params: dict[str, Any],
    page: PageRequest,
    cursor: EventCursor | None,
) -> dict[str, Any]:
    """A page of events (``_NEWEST_FIRST``), read with one row more to know whether any
    follows (``next_cursor``); by ``cursor``, the events after it, with ``page`` null.
    ``total_count`` is that of the whole filtered list either way."""
    total = int(store.query_rows(f"SELECT count() FROM events WHERE {where}", params)[0][0])
    rows: list[Any] = []
    limit = {"limit": page.per_page + 1}
    if cursor is not None:
        rows = store.query_rows(
            _budgeted(
                f"SELECT {_WITH_PAYLOAD} FROM events WHERE {where} AND {_EVENTS_AFTER} "
                f"ORDER BY {_NEWEST_FIRST} LIMIT {{limit:UInt32}}"
            ),
            {**params, **limit, "c_time": ch_time(cursor.timestamp), "c_id": str(cursor.event_id)},
        )
    elif not page.past_end(total):
        rows = store.query_rows(
            _budgeted(
                f"SELECT {_WITH_PAYLOAD} FROM events WHERE {where} "
                f"ORDER BY {_NEWEST_FIRST} LIMIT {{limit:UInt32}} OFFSET {{offset:UInt64}}"
            ),
            {**params, **limit, "offset": page.offset},
        )
    more = len(rows) > page.per_page
    # Payloads of up to 1 MiB each: a page cut by the byte budget goes on by its cursor.
    shown, cut = within_budget(rows[: page.per_page])
    body = page_body([_with_payload(row) for row in shown], total, page)
    if cursor is not None:
        body["page"] = None
    last = shown[-1] if (more or cut) and shown else None
    body["next_cursor"] = last and EventCursor.after_row(last[_TIMESTAMP], last[_ID]).encode()
    return body


def project_event(store: ClickHouse, project_id: int, event_id: str) -> dict[str, Any]:
    """One event of the project, whatever its issue, with its payload (the id an SDK
    answered, ``sentry_sdk.last_event_id()``, is all a user has to report). The project
    prefix of the key and the ``idx_event_id`` bloom filter narrow the read. NotFound
    when the project has no such event."""
    rows = store.query_rows(
        f"SELECT {EVENT_COLUMNS}, payload FROM events "
        f"WHERE {_PROJECT_EVENTS} AND event_id = {{event_id:UUID}} ORDER BY received_at LIMIT 1",
        {"project_id": project_id, "event_id": event_id},
    )
    if not rows:
        raise NotFound("event not found")
    return _with_payload(rows[0])


def issue_event(store: ClickHouse, project_id: int, issue_id: int, event_id: str) -> dict[str, Any]:
    """One event of the issue, with its payload; ``event_id`` as ``parse_event_id`` gives
    it. The key's (project_id, issue_id) prefix narrows the read to the issue's granules
    and the ``idx_event_id`` bloom filter to the one holding the event. NotFound when the
    issue has no such event (another issue's or project's event included)."""
    rows = store.query_rows(
        f"SELECT {EVENT_COLUMNS}, payload FROM events "
        f"WHERE {_ISSUE_EVENTS} AND event_id = {{event_id:UUID}} ORDER BY received_at LIMIT 1",
        {"project_id": project_id, "issue_id": issue_id, "event_id": event_id},
    )
    if not rows:
        raise NotFound("event not found")
    return _with_payload(rows[0])


def latest_event(
    store: ClickHouse,
    project_id: int,
    issue_id: int,
    *,
    environments: Sequence[str] = (),
    releases: Sequence[str] = (),
) -> dict[str, Any]:
    """The issue's newest event (the first of ``issue_events``, in the same order), with
    its payload; NotFound when it has none (or none matching the filters). The order is
    the table's key after (project_id, issue_id), so ClickHouse reads it in order."""
    where, params = _event_filter(
        _ISSUE_EVENTS, {"project_id": project_id, "issue_id": issue_id}, environments, releases
    )
    rows = store.query_rows(
        f"SELECT {EVENT_COLUMNS}, payload FROM events WHERE {where} "
        f"ORDER BY {_NEWEST_FIRST} LIMIT 1",
        params,
    )
    if not rows:
        filtered = where != _ISSUE_EVENTS
        raise NotFound("no event of the issue matches" if filtered else "the issue has no events")
    return _with_payload(rows[0])


def _with_payload(row: tuple[Any, ...]) -> dict[str, Any]:
    """A row of ``EVENT_COLUMNS`` and then ``payload``."""
    return {**event_item(row[:-1]), "payload": stored_json(row[-1])}


def event_item(row: tuple[Any, ...]) -> dict[str, Any]:
    """One ``EVENT_COLUMNS`` row: ids as 32 hex (as SDKs send them), times in ISO UTC."""
    event_id, issue_id, timestamp, received, level, platform, release, env, *rest = row
    title, culprit, trace_id, span_id = rest
    return {
        "event_id": _hex(event_id),
        "issue_id": issue_id,
        "timestamp": iso_utc(timestamp),
        "received_at": iso_utc(received),
        "level": level,
        "platform": platform,
        "release": release or None,
        "environment": env or None,
        "title": title,
        "culprit": culprit,
        "trace_id": trace_id or None,
        "span_id": span_id or None,
    }


def _hex(value: uuid.UUID | str) -> str:
    return value.hex if isinstance(value, uuid.UUID) else str(value).replace("-", "")
