-- A part is on disk before its insert returns. The spool writer deletes a segment as
-- soon as ClickHouse acknowledges its insert, and ClickHouse did not fsync new parts:
-- for up to ~30 s (the kernel's writeback delay) the rows were in the page cache only,
-- and a power cut or an OS crash lost rows answered 200 for (792 of 800 envelopes in the
-- twenty-fifth session's review; issues in PostgreSQL/SQLite, which do sync, kept
-- counting the lost events). Merged parts need no fsync of their own: the parts they
-- replace stay on disk for old_parts_lifetime (8 min), and a broken merged part is
-- replaced by them at start. The cost per insert is one fsync of the part's files and
-- directory (bench/RESULTS.md, twenty-fifth session).
ALTER TABLE logs MODIFY SETTING fsync_after_insert = 1, fsync_part_directory = 1;
ALTER TABLE events MODIFY SETTING fsync_after_insert = 1, fsync_part_directory = 1;
ALTER TABLE spans MODIFY SETTING fsync_after_insert = 1, fsync_part_directory = 1;
