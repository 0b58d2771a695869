ALTER TABLE usage_rollups DROP COLUMN last_end;
DELETE FROM usage_rollups;
UPDATE rollup_state SET size = 0;
