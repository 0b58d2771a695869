ALTER TABLE tenants DROP COLUMN billing_address;
