-- The spans table's typed maps key on plain String too, for the reason given in 0012:
-- a LowCardinality key inside a Map costs the engine a dictionary per part at every
-- insert and merge. Measured with sustained 20k-row raw inserts of the span rows ingest
-- makes from the Python and Node transaction fixtures (bench.spans_insert, 12 s, fresh
-- directory, alternating, two runs of two rounds, bench/RESULTS.md thirteenth session):
-- CPU per row 8.8-10.1 -> 7.6-7.9 us, rows/s 150-174k -> 198-217k.
ALTER TABLE spans MODIFY COLUMN attr_string Map(String, String), MODIFY COLUMN attr_int Map(String, Int64), MODIFY COLUMN attr_float Map(String, Float64), MODIFY COLUMN attr_bool Map(String, Bool);
