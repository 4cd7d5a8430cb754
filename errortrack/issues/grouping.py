"""The writer's hook for the ``events`` table: fingerprint -> issue, counts per batch.

The writer thread calls ``hook(rows, batch_token)`` before inserting a batch of event
rows into ClickHouse and inserts what it returns. In ONE relational transaction the hook
1. records the batch token (a replay of the same batch -- after a crash between this
   commit and the ClickHouse insert -- finds it and adds no count twice);
2. resolves each (project, fingerprint) to an issue id: from an in-memory cache, else
   by one SELECT per project, creating the issues that do not exist yet;
3. adds each issue's count, first/last seen and regression (resolved -> unresolved) with
   one executemany UPDATE: one statement per batch, not one per event.
Rows of projects deleted meanwhile are dropped. The cache is filled only after the
commit, so a rolled-back transaction never leaves ids of issues that do not exist.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from sqlalchemy.orm import Session, sessionmaker

from errortrack.db import unit_of_work
from errortrack.issues import store
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
        clock: Clock = utc_now,
        cache_size: int = 100_000,
        prune_every: int = PRUNE_EVERY,
    ) -> None:
        self.sessions = sessions
        self.clock = clock
        self.cache_size = cache_size
        self.prune_every = prune_every
        self._cache: dict[Key, int] = {}
        self._calls = 0

    def __call__(self, rows: list[dict[str, Any]], batch_token: str) -> list[dict[str, Any]]:
        if not rows:
            return rows
        groups = _groups(rows)
        with unit_of_work(self.sessions) as session:
            ids = self._group_in(session, groups, batch_token)
        self._remember(ids)
        kept = []
        for row in rows:
            issue_id = ids.get(_key(row))
            if issue_id is not None:  # None: the project is gone
                row["issue_id"] = issue_id
                kept.append(row)
        return kept

    def forget(self, key: Key) -> None:
        """Drop a cached issue id (an optimisation: stale ids are also detected)."""
        self._cache.pop(key, None)

    def _group_in(self, session: Session, groups: dict[Key, Group], token: str) -> dict[Key, int]:
        now = self.clock()
        first_time = store.claim_batch(session, token, now)
        self._calls += 1
        if self._calls % self.prune_every == 0:
            store.forget_batches_before(session, now - TOKEN_KEEP)
        if not first_time:
            # A replay is rare: check every id against the database, not the cache.
            for key in groups:
                self.forget(key)
        ids, created = self._resolve(session, groups)
        # A replay counts only into issues created now (the old ones were deleted).
        counted = ids if first_time else {k: ids[k] for k in created}
        gone = store.add_counts(session, {k: (i, groups[k]) for k, i in counted.items()})
        if gone:
            # Cached issues deleted since: create them again and count into those.
            for key in gone:
                self.forget(key)
                del ids[key]
            stale = {k: groups[k] for k in gone}
            again, _ = self._resolve(session, stale)
            store.add_counts(session, {k: (i, stale[k]) for k, i in again.items()})
            ids.update(again)
        return ids

    def _resolve(
        self, session: Session, groups: dict[Key, Group]
    ) -> tuple[dict[Key, int], set[Key]]:
        """Issue ids for the groups (projects that no longer exist are left out), and the
        keys whose issues were created now."""
        ids = {k: self._cache[k] for k in groups if k in self._cache}
        missing = [k for k in groups if k not in ids]
        if not missing:
            return ids, set()
        found = store.find_issues(session, missing)
        ids.update(found)
        new = {k: groups[k] for k in missing if k not in found}
        if not new:
            return ids, set()
        alive = store.existing_projects(session, (p for p, _ in new))
        new = {k: g for k, g in new.items() if k[0] in alive}
        store.create_issues(session, new)
        created = store.find_issues(session, new)
        ids.update(created)
        return ids, set(created)

    def _remember(self, ids: dict[Key, int]) -> None:
        if len(self._cache) + len(ids) > self.cache_size:
            # Clearing beats LRU bookkeeping here: refilling costs one SELECT per project.
            self._cache.clear()
        self._cache.update(ids)


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
        if seen < group.first_seen:
            # A new issue is named after its earliest event, whatever the arrival order.
            group.first_seen = seen
            group.title, group.culprit, group.level = row["title"], row["culprit"], row["level"]
        group.last_seen = max(group.last_seen, seen)
    return groups


def _as_datetime(value: Any) -> dt.datetime:
    """Row timestamps are float Unix seconds or ISO strings (the spool's JSON rows)."""
    if isinstance(value, int | float):
        return dt.datetime.fromtimestamp(value, dt.UTC)
    parsed = dt.datetime.fromisoformat(str(value))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)
