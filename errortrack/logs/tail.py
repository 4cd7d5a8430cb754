"""Following a project's logs as they are stored (``GET /api/projects/{id}/logs/tail``).

A follower wants every log once, in the order logs become readable, whatever their own
times say. Neither time serves: ``timestamp`` is the SDK's (a log sent late sorts
before where the follower is) and ``ingested_at`` is stamped when the request arrives,
while rows wait in the spool (seconds under load, as long as ClickHouse is down) and
reach the table in batches. The table itself keeps the order (clickhouse/0016): every
row holds the number of the insert that stored it and its place in that insert
(``_block_number``, ``_block_offset``). On one node a MergeTree takes those numbers from
one counter when it commits an insert, under the lock that makes the insert readable,
so every row readable later has a larger number than every row readable now. A cursor
is such a position: the rows after it are exactly those the follower has not seen.

Each read first takes the table's highest committed block number (``system.parts``) and
then reads only up to it: a row committed between the two reads is left for the next
poll, where the cursor, moved to that number, finds it. Without the bound, such a row
could be committed below a number already returned on the page and be skipped.

A cluster numbers each shard's inserts, per partition, on its own, and so does a
replicated table: no single order exists there, so following is refused (501).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any

from errortrack.analytics import ClickHouse
from errortrack.errors import NotSupported, ValidationError
from errortrack.logs import attributes
from errortrack.logs.filters import LogFilter
from errortrack.logs.query import COLUMNS, budgeted, log_item, where_clause
from errortrack.paging import cursor_fields, encode_cursor, within_budget

# Far longer than any cursor this module writes (~60 characters).
MAX_LENGTH = 120
_KIND = "tail"
_ONE_NODE = (
    "following logs needs the logs table on a single ClickHouse node as a plain MergeTree "
    "(here: {}): each shard, partition or replica numbers its inserts on its own "
    "(docs/API.md, Logs)"
)
_U64 = 2**64 - 1
_REFUSED = "cursor is not a tail cursor this server gave out (pass next_cursor as it came)"
# The first page looks for the newest rows among the last this many inserts before it
# reads the project's whole history: parts holding only older inserts are skipped
# without being opened (bench/RESULTS.md, twenty-second session).
_RECENT_BLOCKS = 64
# Parts holding no insert numbered ``low`` or later: never opened. A part's name is
# <partition id>_<min block>_<max block>_<level>[_<mutation>], and the logs table's
# partition ids ("20261125-30", clickhouse/0001) hold no "_"; ClickHouse filters parts
# on _part before it reads them. The filter also stays on every row: splitByChar runs
# once per distinct part name there, mergeTreePartInfo(_part) ran per row (3.5x the whole
# read when no part was skipped), and a second term for the parts' lower end made every
# read that skipped nothing 2x slower for the few parts it could skip (bench/RESULTS.md,
# twenty-second session).
_PART_BLOCK = "toUInt64(splitByChar('_', _part)[{}])"
_PARTS = f"{_PART_BLOCK.format(3)} >= {{low:UInt64}}"


@dataclasses.dataclass(frozen=True)
class TailCursor:
    """After the row at (block, offset); ``offset`` None: after the whole block."""

    block: int
    offset: int | None = None

    def encode(self) -> str:
        return encode_cursor([_KIND, self.block, self.offset])


def decode(text: str) -> TailCursor:
    """The cursor ``encode`` wrote; anything else (a logs list cursor too) is a 400."""
    kind, block, offset = cursor_fields(text, size=3, max_length=MAX_LENGTH, refused=_REFUSED)
    # bool is an int to Python: True must not pass for a number.
    if (
        kind != _KIND
        or type(block) is not int
        or not 0 <= block <= _U64
        or not (offset is None or (type(offset) is int and 0 <= offset <= _U64))
    ):
        raise ValidationError(_REFUSED, field="cursor")
    return TailCursor(block, offset)


def tail_logs(
    store: ClickHouse,
    project_id: int,
    f: LogFilter,
    limit: int,
    *,
    cursor: TailCursor | None = None,
) -> dict[str, Any]:
    """``{items, next_cursor, more}``: without ``cursor`` the ``limit`` matching logs
    stored last, with it the first ``limit`` stored after it; oldest stored first either
    way. ``next_cursor`` is never null: the walk has no end, a follower polls it.
    ``more``: matching logs already stored follow this page (poll again at once)."""
    high = _committed(store)
    if cursor is not None:
        if cursor.block > high:
            # The parts holding the last inserts are gone (a dropped partition: cleanup,
            # the disk cap, TTL), so no row is numbered above ``high`` now. Going on from
            # ``high`` repeats nothing, and after a restart, which numbers new inserts
            # from the highest remaining part again, it still finds them (a review found
            # a kept cursor skipping those).
            return _body([], TailCursor(high), more=False)
        if cursor.block == high and cursor.offset is None:
            return _body([], cursor, more=False)  # nothing committed after it
    # Only now, so that a poll finding nothing new asks no more than ``high``.
    where, params = where_clause(project_id, f, absent=attributes.absent_maps(store, project_id, f))
    params = {**params, "high": high}
    if cursor is None:
        # Everything committed up to ``high`` is behind the follower now, shown or not.
        return _body(_last(store, where, params, high, limit), TailCursor(high), more=False)
    after = "_block_number > {c_block:UInt64}"
    if cursor.offset is not None:
        after = (
            f"(_block_number >= {{c_block:UInt64}} AND ({after} "
            "OR _block_offset > {c_offset:UInt64}))"
        )
    select = (
        f"SELECT {COLUMNS}, _block_number, _block_offset FROM logs "
        f"WHERE {_PARTS} AND {where} AND {after} AND _block_number <= {{high:UInt64}} "
        "ORDER BY _block_number, _block_offset LIMIT {limit:UInt32}"
    )
    rows = store.query_rows(
        budgeted(select, "_block_number, _block_offset"),
        {
            **params,
            # The parts that can hold a row after the cursor: a cursor after a whole
            # block needs none of the part ending with it (that part, merged into a
            # large one, made such a poll 6x slower in review).
            "low": cursor.block + (cursor.offset is None),
            "c_block": cursor.block,
            "c_offset": cursor.offset,
            "limit": limit + 1,
        },
    )
    more = len(rows) > limit
    rows, cut = within_budget(rows[:limit])
    more = more or cut
    # A page that is not full has read everything up to ``high``: the next poll starts
    # there, so a filter that matches nothing does not leave the cursor (and the parts
    # it opens) ever further behind.
    return _body(rows, cursor_after(rows[-1]) if more else TailCursor(high), more=more)


def cursor_after(row: tuple[Any, ...]) -> TailCursor:
    return TailCursor(int(row[-2]), int(row[-1]))


def _committed(store: ClickHouse) -> int:
    """The highest block number of the logs table's readable parts: every insert
    committed later gets a higher one (0 for a table that never held a row).

    Only a plain MergeTree numbers its inserts that way. A cluster's Distributed table,
    and a ReplicatedMergeTree or SharedMergeTree (which a Replicated database or
    ClickHouse Cloud makes of every MergeTree), number them per partition, and a replica
    reserves a number before it commits: no single order to follow there (501)."""
    if store.cluster:
        raise NotSupported(_ONE_NODE.format("a cluster"))
    if store not in _PLAIN:
        # Asked once per store: only DDL (a migration, a restart) changes the engine, and
        # the lookup doubled the cost of this query (1.7 -> 3.4 ms; review).
        engine = store.query_rows(
            "SELECT any(engine) FROM system.tables "
            "WHERE database = currentDatabase() AND name = 'logs'"
        )[0][0]
        if engine != "MergeTree":
            raise NotSupported(_ONE_NODE.format(engine or "no logs table"))
        _PLAIN.add(store)
    high = store.query_rows(
        "SELECT max(max_block_number) FROM system.parts "
        "WHERE database = currentDatabase() AND table = 'logs' AND active"
    )[0][0]
    return int(high or 0)


# Stores whose logs table was found to be a plain MergeTree.
_PLAIN: weakref.WeakSet[ClickHouse] = weakref.WeakSet()


def _last(
    store: ClickHouse,
    where: str,
    params: dict[str, Any],
    high: int,
    limit: int,
) -> list[Any]:
    """The ``limit`` rows stored last (up to ``high``), oldest first. Read among the last
    ``_RECENT_BLOCKS`` inserts first: when those hold ``limit`` matching rows they hold
    the newest ``limit`` of all; otherwise the whole history is read."""
    newest_first = "_block_number DESC, _block_offset DESC"
    sql = budgeted(
        f"SELECT {COLUMNS}, _block_number, _block_offset FROM logs "
        f"WHERE {_PARTS} AND {where} AND _block_number BETWEEN {{low:UInt64}} AND {{high:UInt64}} "
        f"ORDER BY {newest_first} LIMIT {{limit:UInt32}}",
        newest_first,
    )
    recent = max(high - _RECENT_BLOCKS, 0)
    rows = store.query_rows(sql, {**params, "low": recent, "limit": limit})
    if len(rows) < limit and recent > 0:
        # Let go of the first answer before reading the second: both at once held two
        # pages of logs in memory (+3.5 GB for a page of 1 MB logs, against +2.7 GB).
        del rows
        rows = store.query_rows(sql, {**params, "low": 0, "limit": limit})
    # The newest logs that fit the budget: the older ones are behind the follower anyway.
    return within_budget(rows)[0][::-1]


def _body(rows: list[Any], after: TailCursor, *, more: bool) -> dict[str, Any]:
    return {
        "items": [log_item(row[:-2]) for row in rows],
        "next_cursor": after.encode(),
        "more": more,
    }
