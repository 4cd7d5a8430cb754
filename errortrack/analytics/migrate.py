"""Applies clickhouse/NNNN_name.sql in order, once each, recording what it applied.

The same files serve a single node (chDB or one server) and a cluster: with a cluster
name, every ``CREATE TABLE t (...) ENGINE = MergeTree`` is rendered as a
``t_local ... ON CLUSTER`` ReplicatedMergeTree table plus a Distributed table ``t`` over
it, sharded by the file's ``-- shard_key:`` comment.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from errortrack.analytics.store import ClickHouse

DDL_DIR = Path(__file__).resolve().parent.parent.parent / "clickhouse"
RECORD_TABLE = "schema_migrations"

_CREATE = re.compile(
    r"^CREATE TABLE IF NOT EXISTS (?P<name>\w+)\s*(?P<body>\(.*\))\s*ENGINE\s*=\s*MergeTree\b"
    r"(?P<rest>.*)$",
    re.S,
)
_ALTER = re.compile(r"^ALTER TABLE (?P<name>\w+)\b(?P<rest>.*)$", re.S)
_SHARD_KEY = re.compile(r"^--\s*shard_key:\s*(?P<key>.+)$", re.M)


@dataclasses.dataclass(frozen=True)
class Migration:
    name: str
    sql: str

    @property
    def shard_key(self) -> str:
        match = _SHARD_KEY.search(self.sql)
        return match.group("key").strip() if match else "rand()"

    def statements(self) -> list[str]:
        # Whole-line comments only: SQL strings in these files never contain "--".
        text = "\n".join(
            line for line in self.sql.splitlines() if not line.lstrip().startswith("--")
        )
        return [s.strip() for s in re.split(r";\s*(?:\n|$)", text) if s.strip()]


def load(directory: Path = DDL_DIR) -> list[Migration]:
    files = sorted(directory.glob("[0-9][0-9][0-9][0-9]_*.sql"))
    return [Migration(f.stem, f.read_text()) for f in files]


def render(migration: Migration, *, database: str, cluster: str = "") -> list[str]:
    """The statements to run for one migration, on a single node or on a cluster."""
    if not cluster:
        return migration.statements()
    out: list[str] = []
    for stmt in migration.statements():
        out.extend(_render_for_cluster(stmt, database, cluster, migration.shard_key))
    return out


def _render_for_cluster(stmt: str, database: str, cluster: str, shard_key: str) -> list[str]:
    on = f"ON CLUSTER '{cluster}'"
    create = _CREATE.match(stmt)
    if create:
        name, body, rest = create["name"], create["body"], create["rest"]
        local = f"{name}_local"
        zk_path = f"/clickhouse/tables/{{shard}}/{database}/{local}"
        return [
            f"CREATE TABLE IF NOT EXISTS {local} {on} {body}\n"
            f"ENGINE = ReplicatedMergeTree('{zk_path}', '{{replica}}'){rest}",
            f"CREATE TABLE IF NOT EXISTS {name} {on} AS {local}\n"
            f"ENGINE = Distributed('{cluster}', '{database}', '{local}', {shard_key})",
        ]
    alter = _ALTER.match(stmt)
    if alter:
        name, rest = alter["name"], alter["rest"]
        statements = [f"ALTER TABLE {name}_local {on}{rest}"]
        # Column changes must reach the Distributed table too; indexes and TTLs live locally.
        if re.search(r"\bCOLUMN\b", rest, re.I):
            statements.append(f"ALTER TABLE {name} {on}{rest}")
        return statements
    raise ValueError(f"cannot render for a cluster: {stmt[:60]!r}")


def _ensure_record_table(store: ClickHouse) -> None:
    if store.cluster:
        path = f"/clickhouse/tables/{store.database}/{RECORD_TABLE}"
        engine = f"ReplicatedMergeTree('{path}', '{{replica}}')"
        on = f" ON CLUSTER '{store.cluster}'"
    else:
        engine, on = "MergeTree", ""
    store.command(
        f"CREATE TABLE IF NOT EXISTS {RECORD_TABLE}{on} "
        "(name String, applied_at DateTime('UTC') DEFAULT now()) "
        f"ENGINE = {engine} ORDER BY name"
    )


def applied(store: ClickHouse) -> set[str]:
    _ensure_record_table(store)
    return {row[0] for row in store.query_rows(f"SELECT name FROM {RECORD_TABLE}")}


def apply(store: ClickHouse, directory: Path = DDL_DIR) -> list[str]:
    """Apply pending migrations in order; return the names applied now."""
    done = applied(store)
    newly: list[str] = []
    for migration in load(directory):
        if migration.name in done:
            continue
        for stmt in render(migration, database=store.database, cluster=store.cluster):
            store.command(stmt)
        # Recorded after its statements: a crash in between re-runs a file whose
        # statements are all IF NOT EXISTS / idempotent, which is why they are written so.
        store.client().insert(RECORD_TABLE, [[migration.name]], column_names=["name"])
        newly.append(migration.name)
    return newly
