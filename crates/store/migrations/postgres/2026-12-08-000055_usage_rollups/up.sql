-- Usage rollups (issue #28): per tenant ('' for none), start hour, kind, region, node, GPU model
-- ('' for energy) and lease ('' for none), the GPU-seconds or kWh (in units of 10^-9, the
-- finest a quantity may be written) and the number of the usage or energy records that start
-- in that hour. Written in the same transaction as the records; verify-log recomputes them from
-- the leaves. `rollup_state.size`: the entries below it are rolled up (a log from before this
-- table is rolled up once when the ledger opens).
CREATE TABLE usage_rollups (
    tenant TEXT NOT NULL,
    hour BIGINT NOT NULL,
    kind TEXT NOT NULL,
    region TEXT NOT NULL,
    node TEXT NOT NULL,
    gpu_model TEXT NOT NULL,
    lease TEXT NOT NULL,
    quantity_nanos BIGINT NOT NULL,
    records BIGINT NOT NULL,
    PRIMARY KEY (tenant, hour, kind, region, node, gpu_model, lease)
);
CREATE INDEX usage_rollups_hour ON usage_rollups (hour);
CREATE TABLE rollup_state (
    id BIGINT PRIMARY KEY,
    size BIGINT NOT NULL
);
INSERT INTO rollup_state (id, size) VALUES (1, 0);
