-- The evidence kept of conflicting records is bounded per (signer, seq) and per signer per hour
-- (store::write::MAX_CONFLICTS_PER_SEQ, MAX_CONFLICTS_PER_SIGNER_HOUR): counted through these.
CREATE INDEX conflicts_signer_seq ON conflicts (signer, seq);
CREATE INDEX conflicts_signer_received ON conflicts (signer, received_at);
