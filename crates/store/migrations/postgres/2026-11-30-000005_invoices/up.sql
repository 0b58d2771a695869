-- Issued invoices as rendered (JSON), for download. The log holds each one's SHA-256 in its
-- invoice_issued entry, and every amount can be recomputed from the log.
CREATE TABLE invoices (
    number          TEXT PRIMARY KEY NOT NULL,
    tenant          TEXT NOT NULL,
    currency        TEXT NOT NULL,
    period_from     BIGINT NOT NULL,
    period_to       BIGINT NOT NULL,
    checkpoint_size BIGINT NOT NULL,
    entry_idx       BIGINT NOT NULL,
    json            TEXT NOT NULL
);
CREATE INDEX invoices_tenant ON invoices (tenant, period_from);
