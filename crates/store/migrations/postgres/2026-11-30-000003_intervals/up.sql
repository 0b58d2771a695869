-- Each usage or energy entry's measurement stream and interval, derived from its leaf and
-- checked by verify-log, indexed so that overlapping records can be refused.
-- A stream: "gpu_usage|node|tenant|lease|gpu_model" or "energy|node|tenant".
ALTER TABLE entries ADD COLUMN stream TEXT;
ALTER TABLE entries ADD COLUMN start_at BIGINT;
ALTER TABLE entries ADD COLUMN end_at BIGINT;
CREATE INDEX entries_stream_start ON entries (stream, start_at);
