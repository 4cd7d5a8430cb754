-- Merges of the logs table read and write 2,048 rows at a time instead of 8,192. A merge
-- holds one block per source part, and a log row is wide (the attributes JSON alone is
-- ~560 bytes); under a steady ingest the server's memory spiked by 150-250 MB every few
-- seconds. Measured with bench/ingest_logs.py in alternating runs: this alone took peak
-- RSS from ~735 to ~700 MB, and with the writer's input_format_parallel_parsing = 0
-- (errortrack/spool/writer.py) to a median of 671 MB, no loss of rows/s
-- (bench/RESULTS.md, third session).
ALTER TABLE logs MODIFY SETTING merge_max_block_size = 2048;
