-- The typed attribute maps key on plain String, not LowCardinality(String). A
-- LowCardinality key inside a Map is an array of dictionary-encoded strings: every
-- insert builds a dictionary per part for them and every merge re-indexes them, and
-- the maps carry ~12 keys per log. Measured with sustained 20k-row raw inserts
-- (bench.engine_costs, "20k-row batches" against "20k, LowCardinality map keys", 15 s,
-- fresh directory, alternating, bench/RESULTS.md thirteenth session): CPU per row
-- 25.1-26.2 -> 18.4-18.6 us, rows/s 64-65k -> 87-88k, bytes on disk within the spread.
-- The indexes and projections over mapKeys() are unchanged. On a table that holds logs
-- each statement is a mutation: the maps of every stored part are rewritten in the
-- background after start-up, and queries read the parts not yet rewritten meanwhile.
ALTER TABLE logs MODIFY COLUMN attr_string Map(String, String);
ALTER TABLE logs MODIFY COLUMN attr_int Map(String, Int64);
ALTER TABLE logs MODIFY COLUMN attr_float Map(String, Float64);
ALTER TABLE logs MODIFY COLUMN attr_bool Map(String, Bool);
