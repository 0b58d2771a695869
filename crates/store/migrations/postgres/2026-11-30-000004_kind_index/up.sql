-- Entries by kind, for rating (prices, region parameters, leases) without a full scan.
CREATE INDEX entries_kind_idx ON entries (kind, idx);
