-- Tenants and API tokens. Tokens are stored as SHA-256 hashes only.
CREATE TABLE tenants (
    id         TEXT PRIMARY KEY NOT NULL,
    name       TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

CREATE TABLE api_tokens (
    id         TEXT PRIMARY KEY NOT NULL,
    token_hash BLOB NOT NULL,
    role       TEXT NOT NULL,
    tenant     TEXT REFERENCES tenants (id),
    label      TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
