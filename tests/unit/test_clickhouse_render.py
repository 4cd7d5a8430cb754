"""The same DDL files render for one node and for a cluster."""

from errortrack.analytics import migrate


def _logs():
    return next(m for m in migrate.load() if m.name == "0001_logs")


def test_files_are_numbered_and_ordered():
    names = [m.name for m in migrate.load()]
    assert names == sorted(names)
    assert names[:3] == ["0001_logs", "0002_events", "0003_spans"]


def test_single_node_keeps_mergetree():
    (stmt,) = migrate.render(_logs(), database="et")
    assert "ENGINE = MergeTree" in stmt
    assert "ON CLUSTER" not in stmt
    assert "--" not in stmt  # comments stripped


def test_cluster_renders_replicated_local_and_distributed():
    local, dist = migrate.render(_logs(), database="et", cluster="main")
    assert local.startswith("CREATE TABLE IF NOT EXISTS logs_local ON CLUSTER 'main' (")
    assert (
        "ENGINE = ReplicatedMergeTree('/clickhouse/tables/{shard}/et/logs_local', '{replica}')"
        in local
    )
    # Everything after the engine (partitioning, order, TTL, settings) is kept.
    assert "PARTITION BY (toDate(timestamp), retention_days)" in local
    assert "TTL toDateTime(timestamp) + toIntervalDay(retention_days)" in local
    assert dist == (
        "CREATE TABLE IF NOT EXISTS logs ON CLUSTER 'main' AS logs_local\n"
        "ENGINE = Distributed('main', 'et', 'logs_local', cityHash64(project_id, trace_id))"
    )


def test_cluster_renders_alters_for_local_and_distributed_columns():
    m = migrate.Migration(
        "0099_x",
        "ALTER TABLE logs ADD COLUMN IF NOT EXISTS x String;\n"
        "ALTER TABLE logs ADD INDEX IF NOT EXISTS i x TYPE bloom_filter GRANULARITY 1;\n",
    )
    out = migrate.render(m, database="et", cluster="c")
    assert out == [
        "ALTER TABLE logs_local ON CLUSTER 'c' ADD COLUMN IF NOT EXISTS x String",
        "ALTER TABLE logs ON CLUSTER 'c' ADD COLUMN IF NOT EXISTS x String",
        "ALTER TABLE logs_local ON CLUSTER 'c' ADD INDEX IF NOT EXISTS i x TYPE bloom_filter GRANULARITY 1",
    ]


def test_every_ddl_file_renders_for_a_cluster():
    """A new file the renderer cannot translate must fail here, not on a production cluster."""
    for m in migrate.load():
        for stmt in migrate.render(m, database="et", cluster="c"):
            assert "ON CLUSTER 'c'" in stmt, (m.name, stmt)
            table = stmt.split()[5] if stmt.startswith("CREATE") else stmt.split()[2]
            # Column changes go to the Distributed table as well (it has its own columns).
            distributed_column = stmt.startswith("ALTER") and " COLUMN " in stmt
            assert (
                table.endswith("_local") or "ENGINE = Distributed" in stmt or distributed_column
            ), (m.name, stmt)
