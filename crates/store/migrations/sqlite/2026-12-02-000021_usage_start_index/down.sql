DROP INDEX entries_tenant_start;
