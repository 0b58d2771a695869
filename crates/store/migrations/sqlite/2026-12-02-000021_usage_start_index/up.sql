-- A tenant's usage and energy records by interval start, for reads that cost what they return:
-- usage queries, invoice previews, invoices and certificates select the records starting in a
-- period through this index (an index-only range scan that yields their log indexes) instead
-- of reading the tenant's whole history. Only usage and energy entries have a start, so the
-- index is partial: the other kinds are never looked up by start.
CREATE INDEX entries_tenant_start ON entries (tenant, start_at, idx) WHERE start_at IS NOT NULL;
