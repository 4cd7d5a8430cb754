-- Which attribute names occur in which typed map, per project: an aggregate projection
-- holding each part's distinct keys of the four maps. A filter such as
-- attr[http.status_code]=503 could match the integer, double or string map, and reading
-- a map it is not in costs a scan; errortrack.logs.attributes asks this projection first
-- (one small read per part, ~6 ms at 10 M logs against ~15 ms for the LIMIT 1 probes over
-- the key bloom filters it replaces; bench/RESULTS.md). Parts written before this file
-- (not yet materialised) are read from the table itself, so answers stay exact.
-- Measured: no difference in the insert rate of 20k-row batches.
ALTER TABLE logs ADD PROJECTION IF NOT EXISTS attr_names (SELECT project_id, groupUniqArrayArray(mapKeys(attr_string)), groupUniqArrayArray(mapKeys(attr_int)), groupUniqArrayArray(mapKeys(attr_float)), groupUniqArrayArray(mapKeys(attr_bool)) GROUP BY project_id);
ALTER TABLE logs MATERIALIZE PROJECTION attr_names;
