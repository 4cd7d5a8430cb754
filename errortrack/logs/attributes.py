"""Typed attribute filters (``attr[name]=value``) as SQL over the typed maps.

An attribute lands in the map of its declared type at ingest (``attr_string``,
``attr_int``, ``attr_float``, ``attr_bool``). The text of a filter value decides which
maps it can match in: "503" the integer 503, the double 503.0 or the string "503";
"true" a boolean or a string; "abc" only a string. Each candidate map is one OR branch.

Reading a map costs a scan of that column, the string map most (~4x the integer map at
10 M rows). So before querying, a probe per candidate map asks whether the name occurs
in it at all in the project (``LIMIT 1``; the bloom filters on the maps' keys answer
"nowhere" without reading rows), and absent maps are left out of the filter.
"""

from __future__ import annotations

from typing import Any

from errortrack.analytics import ClickHouse
from errortrack.logs.filters import AttrFilter, LogFilter, as_bool, as_float, as_int

MAPS = (
    ("attr_string", "String", lambda v: v),
    ("attr_int", "Int64", as_int),
    ("attr_float", "Float64", as_float),
    ("attr_bool", "Bool", as_bool),
)
Absent = frozenset[tuple[str, str]]  # (attribute name, map column)


def candidates(attr: AttrFilter) -> list[tuple[str, str, list[Any]]]:
    """(map column, ClickHouse type, values in that type) for each map the values fit."""
    found = []
    for column, ch_type, convert in MAPS:
        values = [v for v in map(convert, attr.values) if v is not None]
        if values:
            found.append((column, ch_type, values))
    return found


def absent_maps(store: ClickHouse, project_id: int, f: LogFilter) -> Absent:
    """The (name, map) pairs of ``f``'s candidates that hold no such name in the project.

    Only asked when a filter has more than one candidate map: with one, the filter
    reads that map anyway and a probe would only add a query. All probes go in one
    ``UNION ALL`` query, whose branches ClickHouse runs in parallel.
    """
    probes: list[tuple[str, str]] = []
    for attr in f.attributes:
        maps = candidates(attr)
        if len(maps) >= 2:
            probes.extend((attr.name, column) for column, _, _ in maps)
    if not probes:
        return frozenset()
    params: dict[str, Any] = {"project_id": project_id}
    branches = []
    for i, (name, column) in enumerate(probes):
        params[f"n{i}"] = name
        branches.append(
            f"SELECT {i} FROM (SELECT 1 FROM logs WHERE project_id = {{project_id:UInt64}} "
            f"AND mapContains({column}, {{n{i}:String}}) LIMIT 1)"
        )
    found = {int(row[0]) for row in store.query_rows(" UNION ALL ".join(branches), params)}
    return frozenset(probe for i, probe in enumerate(probes) if i not in found)


def clause(attr: AttrFilter, key: str, params: dict[str, Any], absent: Absent) -> str:
    """True when the attribute, in the map of its own type, equals one of the values."""
    params[f"{key}_name"] = attr.name
    name = f"{{{key}_name:String}}"
    parts = []
    for column, ch_type, values in candidates(attr):
        if (attr.name, column) in absent:
            continue
        param = f"{key}_{column}"
        params[param] = values
        # mapContains first: a missing key reads as the type's default ('' / 0 / false).
        parts.append(
            f"(mapContains({column}, {name}) AND {column}[{name}] IN {{{param}:Array({ch_type})}})"
        )
    return "(" + " OR ".join(parts) + ")" if parts else "0"
