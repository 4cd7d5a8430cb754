-- Rows and time span per partition and project without reading the rows: GET
-- /api/storage counts each table's rows per partition and project with their oldest and
-- newest timestamps (errortrack.storage.usage), and that read every row's project_id and
-- time: 1.9 s at 50 M rows, past the API's query timeout (ERRORTRACK_QUERY_TIMEOUT_SECONDS)
-- somewhere near a billion. This aggregate projection keeps one row per project per
-- part, and the engine answers the report's GROUP BY _partition_id, project_id from it
-- (a part never spans partitions): 1.3 s -> 0.05 s at 20 M rows (bench/RESULTS.md,
-- twenty-first session). The logs table has none: the report reads its severity_counts
-- projection (0006) instead, as a usage projection cost 2-3 % of the engine's CPU per
-- stored log.
-- Lightweight DELETEs (an issue's delete, storage cleanup) are refused on tables with
-- projections unless told what to do with them: rebuild the projection of the parts they
-- touch, so that the report never counts deleted rows (as for logs in 0006).
ALTER TABLE events MODIFY SETTING lightweight_mutation_projection_mode = 'rebuild';
ALTER TABLE events ADD PROJECTION IF NOT EXISTS usage (SELECT project_id, count(), min(timestamp), max(timestamp) GROUP BY project_id);
ALTER TABLE events MATERIALIZE PROJECTION usage;
ALTER TABLE spans MODIFY SETTING lightweight_mutation_projection_mode = 'rebuild';
ALTER TABLE spans ADD PROJECTION IF NOT EXISTS usage (SELECT project_id, count(), min(start_timestamp), max(start_timestamp) GROUP BY project_id);
ALTER TABLE spans MATERIALIZE PROJECTION usage;
