DROP INDEX entries_tenant_kind;
