DROP INDEX entries_stream_start;
ALTER TABLE entries DROP COLUMN end_at;
ALTER TABLE entries DROP COLUMN start_at;
ALTER TABLE entries DROP COLUMN stream;
