-- The tenant's spend thresholds per currency and calendar month, and its commitment draw-down
-- percentages (JSON: {"spend": {currency: [amount string]}, "commitment_percent": [string]});
-- NULL when none. Account data, not the log: they raise spend.threshold and commitment.reached.
ALTER TABLE tenants ADD COLUMN usage_alerts TEXT;
