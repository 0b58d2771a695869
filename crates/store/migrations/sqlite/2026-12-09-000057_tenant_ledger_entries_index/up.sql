-- A tenant's entries without an interval (contracts, leases, invoices, payments, prepayments) by
-- kind: usage and energy records never enter it, so it costs their append nothing, and a
-- tenant's one contract is found without walking its millions of records (issue #28,
-- `store::read::tenant_ledger_entries`).
CREATE INDEX entries_tenant_kind ON entries (tenant, kind, idx) WHERE start_at IS NULL;
