DROP TABLE conflicts;
DROP TABLE signer_keys;
DROP TABLE signers;
DROP TABLE checkpoints;
DROP TABLE tree_hashes;
DROP TABLE entries;
DROP TABLE log_head;
DROP TABLE meta;
