-- The server makes each log's id at insert: ingest leaves "id" out of its rows, and a
-- random UUID per row cost less here than 100 made in Python per item (bench/RESULTS.md,
-- sixth session). A row replayed from the spool gets new ids, but its whole block is
-- dropped by the insert deduplication token, so no log is stored twice.
ALTER TABLE logs MODIFY COLUMN id UUID DEFAULT generateUUIDv4();
