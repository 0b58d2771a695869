DROP TABLE rollup_state;
DROP TABLE usage_rollups;
