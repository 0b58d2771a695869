-- Standard Webhooks (docs/WEBHOOKS.md). Not log entries: the outbox of events caused by log
-- entries, written in the same transaction as the entry, and what delivering them did.

-- Endpoints admins registered: a URL, the event types it wants, for all tenants (tenant NULL)
-- or one; signed with the service's Ed25519 key (`ed25519`, header `v1a`) or an HMAC secret
-- of its own (`hmac`, header `v1`; `secret` holds the `whsec_` secret as it must be used for
-- signing and is never served again after creation).
CREATE TABLE webhook_endpoints (
    id              TEXT PRIMARY KEY NOT NULL,
    url             TEXT NOT NULL,
    tenant          TEXT,
    event_types     TEXT NOT NULL,
    signing         TEXT NOT NULL,
    secret          TEXT,
    description     TEXT NOT NULL,
    enabled         BOOLEAN NOT NULL,
    disabled_reason TEXT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);

-- Events: one per cause (a log entry, a conflicting record, a stored cosignature). `payload`
-- is the exact body every delivery of it sends. `dedupe` makes a cause enqueue at most once.
CREATE TABLE webhook_events (
    id         TEXT PRIMARY KEY NOT NULL,
    event_type TEXT NOT NULL,
    tenant     TEXT,
    log_index  BIGINT,
    dedupe     TEXT NOT NULL UNIQUE,
    payload    TEXT NOT NULL,
    created_at BIGINT NOT NULL
);

-- One delivery per (event, endpoint) subscribed when the event was written; its id is the
-- `webhook-id` header, the same on every attempt and on manual redelivery.
CREATE TABLE webhook_deliveries (
    id              TEXT PRIMARY KEY NOT NULL,
    event_id        TEXT NOT NULL REFERENCES webhook_events (id),
    endpoint_id     TEXT NOT NULL REFERENCES webhook_endpoints (id) ON DELETE CASCADE,
    state           TEXT NOT NULL,
    attempts        BIGINT NOT NULL,
    schedule_step   BIGINT NOT NULL,
    next_attempt_at BIGINT NOT NULL,
    lease_owner     TEXT,
    lease_until     BIGINT,
    last_status     BIGINT,
    last_error      TEXT,
    created_at      BIGINT NOT NULL,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (state, next_attempt_at);
CREATE INDEX webhook_deliveries_endpoint ON webhook_deliveries (endpoint_id, created_at);

-- Every attempt: when, how long, the HTTP status or the error.
CREATE TABLE webhook_attempts (
    delivery_id TEXT NOT NULL REFERENCES webhook_deliveries (id) ON DELETE CASCADE,
    attempt     BIGINT NOT NULL,
    started_at  BIGINT NOT NULL,
    duration_ms BIGINT NOT NULL,
    status      BIGINT,
    error       TEXT,
    PRIMARY KEY (delivery_id, attempt)
);
