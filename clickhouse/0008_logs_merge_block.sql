-- Merges of the logs table read and write 2,048 rows at a time instead of 8,192. A merge
-- holds one block per source part, and a log row is wide (the attributes JSON alone is
-- ~560 bytes), so under a steady ingest the merges of 20k-row parts were what lifted the
-- server's memory by 150-250 MB every few seconds. Measured with bench/ingest_logs.py,
-- alternating runs, together with the writer's input_format_parallel_parsing = 0
-- (errortrack/spool/writer.py): peak RSS median 735 -> 671 MB, no loss of rows/s
-- (bench/RESULTS.md).
ALTER TABLE logs MODIFY SETTING merge_max_block_size = 2048;
