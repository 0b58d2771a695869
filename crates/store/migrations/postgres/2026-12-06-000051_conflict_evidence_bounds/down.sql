DROP INDEX conflicts_signer_received;
DROP INDEX conflicts_signer_seq;
