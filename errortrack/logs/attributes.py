"""Typed attribute filters (``attr[name]=value``) as SQL over the typed maps.

An attribute lands in the map of its declared type at ingest (``attr_string``,
``attr_int``, ``attr_float``, ``attr_bool``). The text of a filter value decides which
maps it can match in: "503" the integer 503, the double 503.0 or the string "503";
"true" a boolean or a string; "abc" only a string. Each candidate map is one OR branch.

Reading a map costs a scan of that column, the string map most (~4x the integer map at
10 M rows). So before querying, one probe asks whether the name occurs in each candidate
map at all in the project (the ``attr_names`` projection keeps each part's distinct
keys per map), and absent maps are left out of the filter. The string map itself is
never read for a filter: a text index over its key=value pairs answers it
(``STRING_PAIRS``).
"""

from __future__ import annotations

from typing import Any

from errortrack.analytics import ClickHouse
from errortrack.logs.filters import AttrFilter, LogFilter, as_bool, as_float, as_whole

MAPS = (
    ("attr_string", "String", lambda v: v),
    ("attr_int", "Int64", as_whole),
    ("attr_float", "Float64", as_float),
    ("attr_bool", "Bool", as_bool),
)
Absent = frozenset[tuple[str, str]]  # (attribute name, map column)
# Every string attribute as one token "<key length>:<key>=<value>", indexed whole by the
# text index idx_attr_string_pairs (clickhouse/0009). A filter on the string map asks
# ``hasAny(STRING_PAIRS, tokens)``, which ClickHouse answers from the index's exact row
# lists without reading the map. The length prefix keeps key and value apart: the key
# "a=b" with the value "c" and the key "a" with the value "b=c" make different tokens.
# Must be written exactly as in the index definition, or the index is not used.
STRING_PAIRS = (
    "arrayMap((k, v) -> concat(toString(length(k)), ':', k, '=', v), "
    "mapKeys(attr_string), mapValues(attr_string))"
)


def string_pair(name: str, value: str) -> str:
    """The STRING_PAIRS token of one string attribute (length counts UTF-8 bytes, as
    ClickHouse's ``length`` does)."""
    return f"{len(name.encode())}:{name}={value}"


def candidates(attr: AttrFilter) -> list[tuple[str, str, list[Any]]]:
    """(map column, ClickHouse type, values in that type) for each map the values fit."""
    found = []
    for column, ch_type, convert in MAPS:
        values = [v for v in map(convert, attr.values) if v is not None]
        if ch_type == "Float64" and 0.0 in values:
            # IN tells -0.0 from 0.0 (it compares bits), but a double sent as -0.0 is
            # still zero: "attr[x]=0" finds both, as "=" would.
            values = [*values, 0.0, -0.0]
        if values:
            found.append((column, ch_type, values))
    return found


def absent_maps(store: ClickHouse, project_id: int, f: LogFilter) -> Absent:
    """The (name, map) pairs of ``f``'s candidates that hold no such name in the project.

    Only asked when a filter has more than one candidate map: with one, the filter
    reads that map anyway and a probe would only add a query. Answered by the
    ``attr_names`` projection (clickhouse/0007): each part's distinct keys per map.
    """
    probes: list[tuple[str, str]] = []
    for attr in f.attributes:
        maps = candidates(attr)
        if len(maps) >= 2:
            probes.extend((attr.name, column) for column, _, _ in maps)
    if not probes:
        return frozenset()
    sql, params = probe_query(project_id, probes)
    found = store.query_rows(sql, params)[0]
    return frozenset(probe for probe, present in zip(probes, found, strict=True) if not present)


def probe_query(project_id: int, probes: list[tuple[str, str]]) -> tuple[str, dict[str, Any]]:
    """One row: for each (name, map column), whether the project has that name there."""
    params: dict[str, Any] = {"project_id": project_id}
    checks = []
    for i, (name, column) in enumerate(probes):
        params[f"n{i}"] = name
        # Written exactly as the projection's aggregates, or it is not used.
        checks.append(f"has(groupUniqArrayArray(mapKeys({column})), {{n{i}:String}})")
    sql = f"SELECT {', '.join(checks)} FROM logs WHERE project_id = {{project_id:UInt64}}"
    return sql, params


def clause(attr: AttrFilter, key: str, params: dict[str, Any], absent: Absent) -> str:
    """True when the attribute, in the map of its own type, equals one of the values."""
    params[f"{key}_name"] = attr.name
    name = f"{{{key}_name:String}}"
    parts = []
    for column, ch_type, values in candidates(attr):
        if (attr.name, column) in absent:
            continue
        param = f"{key}_{column}"
        if column == "attr_string":
            params[param] = [string_pair(attr.name, v) for v in values]
            parts.append(f"hasAny({STRING_PAIRS}, {{{param}:Array(String)}})")
            continue
        params[param] = values
        # mapContains first: a missing key reads as the type's default ('' / 0 / false).
        parts.append(
            f"(mapContains({column}, {name}) AND {column}[{name}] IN {{{param}:Array({ch_type})}})"
        )
    return "(" + " OR ".join(parts) + ")" if parts else "0"
