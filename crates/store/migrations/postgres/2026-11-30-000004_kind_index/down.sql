DROP INDEX entries_kind_idx;
