-- The log, its tree and its registry. Quantities never appear as numeric columns: the leaf
-- holds canonical decimal strings, and every derived column is re-checked by verify-log.
CREATE TABLE meta (
    key   TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL
);

-- One row (id = 1): the head of the log. Writers lock it first in every write transaction.
CREATE TABLE log_head (
    id        BIGINT PRIMARY KEY NOT NULL CHECK (id = 1),
    size      BIGINT NOT NULL,
    head_hash BYTEA NOT NULL
);

CREATE TABLE entries (
    idx          BIGINT PRIMARY KEY NOT NULL,
    kind         TEXT NOT NULL,
    signer       TEXT NOT NULL,
    seq          BIGINT NOT NULL,
    tenant       TEXT,
    received_at  BIGINT NOT NULL,
    content_hash BYTEA NOT NULL,
    leaf         BYTEA NOT NULL,
    leaf_hash    BYTEA NOT NULL,
    UNIQUE (signer, seq)
);
CREATE INDEX entries_tenant_idx ON entries (tenant, idx);

-- RFC 6962 tree hashes in tlog's stored-hash order.
CREATE TABLE tree_hashes (
    id   BIGINT PRIMARY KEY NOT NULL,
    hash BYTEA NOT NULL
);

CREATE TABLE checkpoints (
    size       BIGINT PRIMARY KEY NOT NULL,
    root       BYTEA NOT NULL,
    note       TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE signers (
    id       TEXT PRIMARY KEY NOT NULL,
    role     TEXT NOT NULL,
    last_seq BIGINT NOT NULL
);

CREATE TABLE signer_keys (
    key_id         TEXT PRIMARY KEY NOT NULL,
    signer_id      TEXT NOT NULL REFERENCES signers (id),
    public_key     BYTEA NOT NULL,
    registered_idx BIGINT NOT NULL,
    revoked_idx    BIGINT
);

-- A different record under an existing (signer, seq): refused, and kept as evidence.
CREATE TABLE conflicts (
    id           BIGSERIAL PRIMARY KEY,
    signer       TEXT NOT NULL,
    seq          BIGINT NOT NULL,
    existing_idx BIGINT NOT NULL,
    received_at  BIGINT NOT NULL,
    envelope     TEXT NOT NULL
);
