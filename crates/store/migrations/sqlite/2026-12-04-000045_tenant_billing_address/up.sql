-- A tenant's billing address (JSON array of lines), shown on its invoices' bill-to block;
-- account data, not a log entry.
ALTER TABLE tenants ADD COLUMN billing_address TEXT;
