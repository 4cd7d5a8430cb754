-- The spans table's typed maps key on plain String too, for the reason given in 0012:
-- a LowCardinality key inside a Map costs the engine a dictionary per part at every
-- insert and merge. Measured with sustained 20k-row raw inserts of the span rows ingest
-- makes from the Python and Node transaction fixtures (12 s, fresh directory, two
-- alternating rounds, bench/RESULTS.md thirteenth session): CPU per row 8.8-8.9 ->
-- 7.6 us, rows/s 174k -> 213-217k.
ALTER TABLE spans MODIFY COLUMN attr_string Map(String, String);
ALTER TABLE spans MODIFY COLUMN attr_int Map(String, Int64);
ALTER TABLE spans MODIFY COLUMN attr_float Map(String, Float64);
ALTER TABLE spans MODIFY COLUMN attr_bool Map(String, Bool);
