-- Skip indexes measured with bench/query_logs.py at 10 M logs (bench/RESULTS.md).
--
-- Body search: the 3-gram index skipped nothing for the searches people actually make
-- (an order id, a user, an error word): every 3-gram of digits occurs in every granule
-- of 8192 logs, so a count over 4 M rows scanned them all (~400 ms). 5-grams are rare
-- enough to skip ~98% of granules for such terms; at 16 KiB per granule the filter is
-- cheap to read (64 KiB made reading the index itself cost 60 ms). Terms shorter than
-- 5 characters now scan, which they nearly did before.
ALTER TABLE logs ADD INDEX IF NOT EXISTS idx_body_5gram lower(body) TYPE ngrambf_v1(5, 16384, 2, 0) GRANULARITY 1;
ALTER TABLE logs DROP INDEX IF EXISTS idx_body;
-- Attribute filters on string attributes (attr_string['user.id'] = 'u-123'): a bloom
-- filter over the values lets ClickHouse skip granules without that value (~600 -> ~30 ms).
ALTER TABLE logs ADD INDEX IF NOT EXISTS idx_attr_values mapValues(attr_string) TYPE bloom_filter(0.01) GRANULARITY 1;
-- Build both for rows already stored (a background mutation; new parts get them at insert).
ALTER TABLE logs MATERIALIZE INDEX idx_body_5gram;
ALTER TABLE logs MATERIALIZE INDEX idx_attr_values;
