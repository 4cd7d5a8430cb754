-- Counting logs per project and level without reading the rows: every logs list answers
-- total_count, and for a level filter (error+fatal) that count read severity_number of
-- all of a project's rows (~30 ms at 4 M rows). This aggregate projection keeps counts
-- per project, hour and severity, so such counts (and the unfiltered one) read a few
-- hundred rows instead (~5 ms; bench/RESULTS.md). Counts with other filters, or with
-- time bounds off the hour, fall back to the table itself.
ALTER TABLE logs ADD PROJECTION IF NOT EXISTS severity_counts (SELECT project_id, toStartOfHour(timestamp), severity_number, count() GROUP BY project_id, toStartOfHour(timestamp), severity_number);
-- Lightweight DELETEs (storage cleanup) are refused on tables with projections unless
-- told what to do with them: rebuild the projection of the parts they touch.
ALTER TABLE logs MODIFY SETTING lightweight_mutation_projection_mode = 'rebuild';
ALTER TABLE logs MATERIALIZE PROJECTION severity_counts;
