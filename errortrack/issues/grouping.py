"""The writer's hook for the ``events`` table: fingerprint -> issue, counts per batch.

The writer thread calls ``hook(rows, batch_token, enclosing)`` before inserting a batch
of event rows into ClickHouse and inserts what it returns. In ONE relational transaction
the hook
1. records the batch token (a replay of the same batch -- after a crash between this
   commit and the ClickHouse insert -- finds it and adds no count twice). A part of a
   batch the writer bisected (spool/writer.py) comes with the tokens of the ranges that
   held it (``enclosing``): when one of those was recorded, the part's rows were counted
   with it and the part is a replay; when none was (the hook refused the larger range),
   they are new;
2. resolves each (project, fingerprint) to an issue id: from an in-memory cache, else
   by one SELECT per project, creating the issues that do not exist yet (not on a
   replay: its issues were created when it was first taken, so one missing now was
   deleted since, and its rows are dropped with it. Only where several workers write
   (server mode) can another worker's new events of the fingerprint have made the issue
   again before the replay: its rows then go into that issue uncounted, as they did
   before the thirty-second session; telling the two apart needs the issue's creation
   time, which is not stored);
3. drops events already stored (an SDK resending an event it saw fail, or a segment
   replayed after its insert): one ClickHouse query per batch by (project, issue,
   event_id), plus repeats within the batch;
4. adds each issue's count, first/last seen, regression (resolved -> unresolved, when the
   batch's newest event of the issue is dated after the resolution less
   ``store.REGRESSION_MARGIN``) and title/culprit/level (from that newest event, when it
   is at least as new as the issue's last seen) with one executemany UPDATE: one
   statement per batch, not one per event.
Rows of projects deleted meanwhile are dropped. The cache is filled only after the
commit, so a rolled-back transaction never leaves ids of issues that do not exist.
"""

from __future__ import annotations

import datetime as dt
import decimal
from collections.abc import Sequence
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from errortrack.analytics import ClickHouse
from errortrack.db import unit_of_work
from errortrack.issues import store
from errortrack.issues.service import delete_events
from errortrack.issues.store import Group, Key
from errortrack.state import Clock, utc_now

# Tokens only matter until their batch has left the spool; a week covers a long outage.
TOKEN_KEEP = dt.timedelta(days=7)
PRUNE_EVERY = 500


class GroupingHook:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        *,
        store: ClickHouse | None = None,
        clock: Clock = utc_now,
        cache_size: int = 100_000,
        prune_every: int = PRUNE_EVERY,
    ) -> None:
        self.sessions = sessions
        self.store = store  # None: repeats are dropped within a batch only
        self.clock = clock
        self.cache_size = cache_size
        self.prune_every = prune_every
        self._cache: dict[Key, int] = {}
        self._calls = 0
        # The last call's token and the (project, issue) pairs of the rows it returned
        # (after_insert): the writer calls the two in turn, from its one thread.
        self._handed: tuple[str, set[tuple[int, int]]] = ("", set())

    def __call__(
        self,
        rows: list[dict[str, Any]],
        batch_token: str,
        enclosing: Sequence[str] = (),
        *,
        counted: bool = False,
    ) -> list[dict[str, Any]]:
        """``counted``: the writer knows these rows were counted before (a requeued event
        that ClickHouse refused after this hook took it), whatever the tokens say."""
        rows = _first_of_each_event(rows)
        if not rows:
            return rows
        with unit_of_work(self.sessions) as session:
            ids, stored = self._group_in(session, rows, batch_token, enclosing, counted)
        self._remember(ids)
        kept = []
        for row in rows:
            issue_id = ids.get(_key(row))
            # None: the project is gone; stored: this event is in ClickHouse already.
            if issue_id is not None and (issue_id, row["event_id"]) not in stored:
                row["issue_id"] = issue_id
                kept.append(row)
        # For after_insert, which the writer calls with this token once these are in.
        self._handed = (batch_token, {(int(r["project_id"]), r["issue_id"]) for r in kept})
        return kept

    def after_insert(self, token: str) -> None:
        """Delete again the events just inserted into issues deleted meanwhile.

        An issue's DELETE (issues.service.delete) removes the events in the parts that
        exist when it is made, and the API makes it twice, before and after the issue's
        row goes. A batch counted into the issue before that row went, and inserted after
        the second DELETE, stayed under the deleted id and was listed (review: 120 of 120
        large events, 3 rounds of 3). The row's delete waits for this hook's commit, so
        an issue found gone here is gone for good: its events are deleted once more."""
        handed, issues = self._handed
        if self.store is None or handed != token or not issues:
            return
        with unit_of_work(self.sessions) as session:
            alive = store.existing_issues(session, [i for _, i in issues])
        for project_id, issue_id in sorted(issues):
            if issue_id not in alive:
                delete_events(self.store, project_id=project_id, issue_id=issue_id, wait=False)

    def forget(self, key: Key) -> None:
        """Drop a cached issue id (an optimisation: stale ids are also detected)."""
        self._cache.pop(key, None)

    def _group_in(
        self,
        session: Session,
        rows: list[dict[str, Any]],
        token: str,
        enclosing: Sequence[str],
        counted_before: bool,
    ) -> tuple[dict[Key, int], set[tuple[int, str]]]:
        """Issue ids by key, and the (issue id, event id) pairs already stored."""
        now = self.clock()
        first_time = not counted_before and store.claim_batch(session, token, now, enclosing)
        self._calls += 1
        if self._calls % self.prune_every == 0:
            store.forget_batches_before(session, now - TOKEN_KEEP)
        groups = _groups(rows)
        if not first_time:
            # A replay is rare: check every id against the database, not the cache.
            for key in groups:
                self.forget(key)
        # A replay creates no issue: its rows were counted, when first taken, into issues
        # that existed then; one missing now was deleted since, and its rows go with it.
        # Made again, it would count rows that may be in ClickHouse already, under the
        # deleted id, whose insert token then drops them again: an issue with a count and
        # no events (review, thirty-second session).
        ids = self._resolve(session, groups, create=first_time)
        stored = self._stored(rows, ids)
        if stored:
            groups = _groups([r for r in rows if (ids.get(_key(r)), r["event_id"]) not in stored])
        counted = {k: i for k, i in ids.items() if first_time and k in groups}
        gone = store.add_counts(session, {k: (i, groups[k]) for k, i in counted.items()}, now=now)
        if gone:
            # Cached issues deleted since: create them again and count into those.
            for key in gone:
                self.forget(key)
                del ids[key]
            stale = {k: groups[k] for k in gone}
            again = self._resolve(session, stale, create=True)
            store.add_counts(session, {k: (i, stale[k]) for k, i in again.items()}, now=now)
            ids.update(again)
        return ids, stored

    def _stored(self, rows: list[dict[str, Any]], ids: dict[Key, int]) -> set[tuple[int, str]]:
        """The events of ``rows`` that ClickHouse holds already, as (issue id, event id).

        Keyed by (project, issue) -- the table's sort key -- so that the lookup reads only
        those issues' granules, and within them the event_id bloom filter skips the rest.
        An issue deleted since its id was cached has no events left, so it finds none."""
        if self.store is None:
            return set()
        wanted: dict[int, tuple[set[int], set[str]]] = {}
        for row in rows:
            issue_id = ids.get(_key(row))
            if issue_id is not None:
                issues, events = wanted.setdefault(int(row["project_id"]), (set(), set()))
                issues.add(issue_id)
                events.add(row["event_id"])
        stored: set[tuple[int, str]] = set()
        for project_id, (issues, events) in wanted.items():
            found = self.store.query_rows(
                "SELECT issue_id, toString(event_id) FROM events "
                "WHERE project_id = {p:UInt64} AND issue_id IN {i:Array(UInt64)} "
                "AND event_id IN {e:Array(UUID)}",
                {"p": project_id, "i": sorted(issues), "e": sorted(events)},
            )
            stored.update((int(i), str(e)) for i, e in found)
        return stored

    def _resolve(
        self, session: Session, groups: dict[Key, Group], *, create: bool
    ) -> dict[Key, int]:
        """Issue ids for the groups; with ``create``, the missing issues are created
        (projects that no longer exist are left out), without, their groups are."""
        ids = {k: self._cache[k] for k in groups if k in self._cache}
        missing = [k for k in groups if k not in ids]
        if not missing:
            return ids
        found = store.find_issues(session, missing)
        ids.update(found)
        new = {k: groups[k] for k in missing if k not in found}
        if not new or not create:
            return ids
        alive = store.existing_projects(session, (p for p, _ in new))
        new = {k: g for k, g in new.items() if k[0] in alive}
        store.create_issues(session, new)
        ids.update(store.find_issues(session, new))
        return ids

    def _remember(self, ids: dict[Key, int]) -> None:
        if len(self._cache) + len(ids) > self.cache_size:
            # Clearing beats LRU bookkeeping here: refilling costs one SELECT per project.
            self._cache.clear()
        self._cache.update(ids)


def _first_of_each_event(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows without repeats of one (project, event_id): an SDK resent it meanwhile."""
    seen: set[tuple[Any, Any]] = set()
    out = []
    for row in rows:
        event = (row["project_id"], row["event_id"])
        if event not in seen:
            seen.add(event)
            out.append(row)
    return out


def _key(row: dict[str, Any]) -> Key:
    return int(row["project_id"]), str(row["fingerprint"])


def _groups(rows: list[dict[str, Any]]) -> dict[Key, Group]:
    groups: dict[Key, Group] = {}
    for row in rows:
        key = _key(row)
        seen = _as_datetime(row["timestamp"])
        group = groups.get(key)
        if group is None:
            groups[key] = Group(1, seen, seen, row["title"], row["culprit"], row["level"])
            continue
        group.count += 1
        group.first_seen = min(group.first_seen, seen)
        if seen >= group.last_seen:
            # The newest event names the issue, whatever the arrival order (of equal times,
            # the later in the batch): the UPDATE applies it when it is also at least as
            # new as the issue's last seen, so a late event renames nothing.
            group.last_seen = seen
            group.title, group.culprit, group.level = row["title"], row["culprit"], row["level"]
    return groups


_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


def _as_datetime(value: Any) -> dt.datetime:
    """Row timestamps are float Unix seconds or ISO strings (the spool's JSON rows).

    A float is cut (towards zero) to whole microseconds, as ClickHouse reads its decimal
    digits into DateTime64(6); fromtimestamp rounds, and half of all float times made an
    issue's first and last seen 1 us later than its events' (review)."""
    if isinstance(value, int | float):
        seconds, micros = divmod(
            int(decimal.Decimal(repr(value)).scaleb(6).to_integral_value(decimal.ROUND_DOWN)),
            1_000_000,
        )
        return _EPOCH + dt.timedelta(seconds=seconds, microseconds=micros)
    parsed = dt.datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
