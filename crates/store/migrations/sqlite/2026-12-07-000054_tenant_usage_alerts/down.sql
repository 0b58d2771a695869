ALTER TABLE tenants DROP COLUMN usage_alerts;
