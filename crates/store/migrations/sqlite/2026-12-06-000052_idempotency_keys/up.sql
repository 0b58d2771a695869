-- Admin POSTs sent with an Idempotency-Key: the first answer, kept at least 35 days
-- (store::idempotency). A row without a status is a request still running.
CREATE TABLE idempotency_keys (
    scope        TEXT NOT NULL,
    key          TEXT NOT NULL,
    fingerprint  TEXT NOT NULL,
    status       BIGINT,
    content_type TEXT,
    body         BLOB,
    created_at   BIGINT NOT NULL,
    PRIMARY KEY (scope, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
