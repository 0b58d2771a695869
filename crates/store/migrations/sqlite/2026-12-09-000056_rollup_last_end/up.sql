-- The latest end of the intervals of each usage rollup's records (Unix seconds): rating reads
-- a bucket whole only when no price changes before it (issue #28). The rollups are derived
-- data, so they are emptied and rolled up again from the log when the ledger next opens.
ALTER TABLE usage_rollups ADD COLUMN last_end BIGINT NOT NULL DEFAULT 0;
DELETE FROM usage_rollups;
UPDATE rollup_state SET size = 0;
