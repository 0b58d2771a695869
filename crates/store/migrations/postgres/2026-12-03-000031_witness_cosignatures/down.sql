DROP TABLE witness_state;
DROP TABLE cosignatures;
