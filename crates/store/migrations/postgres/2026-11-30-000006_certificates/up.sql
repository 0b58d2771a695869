-- Issued compute-usage certificates (docs/PROTOCOL.md §13) as signed JSON, for download. The
-- log holds each one's SHA-256 in its certificate_issued entry; the bundle that proves it is
-- rebuilt from the log on request.
CREATE TABLE certificates (
    id              TEXT PRIMARY KEY NOT NULL,
    tenant          TEXT NOT NULL,
    period_from     BIGINT NOT NULL,
    period_to       BIGINT NOT NULL,
    checkpoint_size BIGINT NOT NULL,
    entry_idx       BIGINT NOT NULL,
    json            TEXT NOT NULL
);
CREATE INDEX certificates_tenant ON certificates (tenant, period_from);
