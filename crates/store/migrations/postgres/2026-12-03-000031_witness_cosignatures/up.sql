-- Cosignatures that witnesses (C2SP tlog-witness) returned for the log's checkpoints: one
-- `cosignature/v1` note signature line per (checkpoint size, witness), checked against the
-- witness's configured key before it is stored. Served appended to the log-signed note.
CREATE TABLE cosignatures (
    size       BIGINT NOT NULL,
    witness    TEXT NOT NULL,
    line       TEXT NOT NULL,
    cosigned_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (size, witness)
);
-- Per witness: the size of the latest checkpoint it cosigned (what the next add-checkpoint
-- sends as its old size).
CREATE TABLE witness_state (
    witness       TEXT PRIMARY KEY NOT NULL,
    cosigned_size BIGINT NOT NULL,
    updated_at    BIGINT NOT NULL
);
