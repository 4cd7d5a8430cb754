-- String attribute filters (attr[user.id]=u-123) read an inverted index instead of a
-- bloom filter. Each string attribute becomes one token "<key length>:<key>=<value>"
-- (the length prefix makes the token name the key and value unambiguously, whatever
-- either contains), and the `array` tokenizer indexes every token whole, with exact row
-- lists. A filter is then answered from the index alone: ClickHouse neither tests a
-- bloom filter per granule nor reads the map column of the granules that may match.
-- Measured on bench/query_logs.py's 10 M logs (bench/RESULTS.md, fifth session): a
-- user.id count 12.0 -> 6.9 ms, its page 20.4 -> 17.8 ms (p50). The bloom filter over
-- the values (0004) served only these filters and is dropped: 10k-row inserts took
-- 101 ms with it and 101 ms with this index instead (8 alternating inserts each).
-- Text indexes need ClickHouse 26.2 or later (the embedded chDB engine is 26.9).
-- The expression must stay identical to errortrack.logs.attributes.STRING_PAIRS, or
-- queries stop using the index (a test compares them).
ALTER TABLE logs ADD INDEX IF NOT EXISTS idx_attr_string_pairs arrayMap((k, v) -> concat(toString(length(k)), ':', k, '=', v), mapKeys(attr_string), mapValues(attr_string)) TYPE text(tokenizer = 'array');
ALTER TABLE logs MATERIALIZE INDEX idx_attr_string_pairs;
ALTER TABLE logs DROP INDEX IF EXISTS idx_attr_values;
