-- Per currency, the prepaid balance below which an invoice's draws raise a balance.low event
-- (JSON object: currency -> amount string); NULL when none. Account data, not the log.
ALTER TABLE tenants ADD COLUMN low_balance TEXT;
