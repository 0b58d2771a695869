ALTER TABLE tenants DROP COLUMN low_balance;
