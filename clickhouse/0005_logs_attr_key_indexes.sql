-- Bloom filters on the keys of the numeric and boolean attribute maps, like the one on
-- attr_string's keys (0001). They let errortrack.logs.attributes ask "does this project
-- have attribute X as an integer / double / boolean at all?" in a few milliseconds, so a
-- filter such as attr[http.status_code]=503 reads only the maps that can match (measured
-- in bench/RESULTS.md: the double and string branches cost more than the integer one).
ALTER TABLE logs ADD INDEX IF NOT EXISTS idx_attr_int_keys mapKeys(attr_int) TYPE bloom_filter(0.01) GRANULARITY 1;
ALTER TABLE logs ADD INDEX IF NOT EXISTS idx_attr_float_keys mapKeys(attr_float) TYPE bloom_filter(0.01) GRANULARITY 1;
ALTER TABLE logs ADD INDEX IF NOT EXISTS idx_attr_bool_keys mapKeys(attr_bool) TYPE bloom_filter(0.01) GRANULARITY 1;
ALTER TABLE logs MATERIALIZE INDEX idx_attr_int_keys;
ALTER TABLE logs MATERIALIZE INDEX idx_attr_float_keys;
ALTER TABLE logs MATERIALIZE INDEX idx_attr_bool_keys;
