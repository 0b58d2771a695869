//! Connections: one diesel `MultiConnection` over SQLite and PostgreSQL, the backend chosen
//! from the URL scheme, SQLite pragmas set on open, and embedded migrations per backend.

use super::error::StoreError;
use diesel::connection::SimpleConnection;
use diesel::pg::PgConnection;
use diesel::sqlite::SqliteConnection;
use diesel::Connection;
use diesel_migrations::{embed_migrations, EmbeddedMigrations, MigrationHarness};
use std::path::Path;

const SQLITE_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/sqlite");
const POSTGRES_MIGRATIONS: EmbeddedMigrations = embed_migrations!("migrations/postgres");

/// How long a SQLite writer waits for another process's write lock, in milliseconds.
pub const SQLITE_BUSY_TIMEOUT_MS: u32 = 30_000;

/// The default database: a SQLite file in the working directory.
pub const DEFAULT_DATABASE_URL: &str = "sqlite://gpuledger.db";

/// A connection to either backend.
#[derive(diesel::MultiConnection)]
pub enum DbConn {
    Sqlite(SqliteConnection),
    Pg(PgConnection),
}

/// Runs the same diesel expression on the concrete connection of either backend. Used in the
/// few places where diesel's `MultiConnection` cannot express a query (multi-row INSERT).
#[macro_export]
macro_rules! per_backend {
    ($conn:expr, |$c:ident| $body:expr) => {
        match $conn {
            $crate::conn::DbConn::Sqlite($c) => $body,
            $crate::conn::DbConn::Pg($c) => $body,
        }
    };
}
pub use crate::per_backend;

/// Which backend a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Postgres,
}

/// Picks the backend from the URL scheme: `sqlite://PATH` (or `sqlite:PATH`),
/// `postgres://…` or `postgresql://…`. Anything else is refused: SQLite would accept any
/// string as a file name.
pub fn backend_of(url: &str) -> Result<Backend, StoreError> {
    if url.starts_with("sqlite:") {
        Ok(Backend::Sqlite)
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Backend::Postgres)
    } else {
        Err(StoreError::BadUrl(format!(
            "database URL must start with sqlite:// or postgres:// (got {:?})",
            redact(url)
        )))
    }
}

/// The URL with any password replaced by `***`, for messages and logs.
pub fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &url[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:***{}", &url[..s + 3], &creds[..c], &url[at..]),
                None => url.to_owned(),
            }
        }
        _ => url.to_owned(),
    }
}

fn sqlite_path(url: &str) -> &str {
    let rest = url.strip_prefix("sqlite:").unwrap_or(url);
    rest.strip_prefix("//").unwrap_or(rest)
}

/// Opens a connection and prepares it (SQLite: WAL, full fsync on commit, busy timeout).
pub fn connect(url: &str) -> Result<DbConn, StoreError> {
    match backend_of(url)? {
        Backend::Sqlite => {
            create_private(Path::new(sqlite_path(url)))?;
            let mut c = SqliteConnection::establish(sqlite_path(url))
                .map_err(|e| StoreError::Connect(e.to_string()))?;
            c.batch_execute(&format!(
                "PRAGMA busy_timeout = {SQLITE_BUSY_TIMEOUT_MS};
                 PRAGMA journal_mode = WAL;
                 PRAGMA synchronous = FULL;
                 PRAGMA foreign_keys = ON;"
            ))?;
            Ok(DbConn::Sqlite(c))
        }
        Backend::Postgres => {
            let c = PgConnection::establish(url)
                .map_err(|e| StoreError::Connect(redact(&e.to_string())))?;
            Ok(DbConn::Pg(c))
        }
    }
}

/// A connection whose session cannot write: the reader pool ([`crate::reads::Reads`]) holds
/// only these. The database enforces it (SQLite `PRAGMA query_only`, PostgreSQL
/// `default_transaction_read_only`): an INSERT, UPDATE, DELETE or DDL statement on it fails.
/// The only ways to make one are [`connect_read_only`] and [`ReadConn::seal`].
pub struct ReadConn(DbConn);

impl ReadConn {
    /// Turns an open connection into a read-only one for the rest of its session.
    pub fn seal(mut conn: DbConn) -> Result<ReadConn, StoreError> {
        match &mut conn {
            DbConn::Sqlite(c) => c.batch_execute("PRAGMA query_only = ON")?,
            DbConn::Pg(c) => c.batch_execute("SET default_transaction_read_only = on")?,
        }
        Ok(ReadConn(conn))
    }

    /// The connection, for the query functions (every one takes a `DbConn`); what it runs
    /// still cannot write.
    pub fn db(&mut self) -> &mut DbConn {
        &mut self.0
    }
}

/// Opens a read-only connection ([`ReadConn`]).
pub fn connect_read_only(url: &str) -> Result<ReadConn, StoreError> {
    ReadConn::seal(connect(url)?)
}

/// Creates the SQLite file readable and writable by its owner only (0600) when it does not
/// exist yet; SQLite gives its `-wal` and `-shm` files the same mode. An existing file is
/// left as it is.
fn create_private(path: &Path) -> Result<(), StoreError> {
    use std::os::unix::fs::OpenOptionsExt;
    if path.as_os_str().is_empty() || path == Path::new(":memory:") || path.exists() {
        return Ok(());
    }
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
    {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(StoreError::Connect(format!("{}: {e}", path.display()))),
    }
}

/// Runs every pending migration of the connection's backend.
pub fn migrate(conn: &mut DbConn) -> Result<(), StoreError> {
    let r = match conn {
        DbConn::Sqlite(c) => c.run_pending_migrations(SQLITE_MIGRATIONS).map(|_| ()),
        DbConn::Pg(c) => {
            // Several processes may start at once: serialise migrations with an advisory lock.
            c.batch_execute("SELECT pg_advisory_lock(7301966)")?;
            let r = c.run_pending_migrations(POSTGRES_MIGRATIONS).map(|_| ());
            c.batch_execute("SELECT pg_advisory_unlock(7301966)")?;
            r
        }
    };
    r.map_err(|e| StoreError::Migration(e.to_string()))
}

/// Whether every embedded migration has been applied.
pub fn migrations_current(conn: &mut DbConn) -> Result<bool, StoreError> {
    let r = match conn {
        DbConn::Sqlite(c) => c.has_pending_migration(SQLITE_MIGRATIONS),
        DbConn::Pg(c) => c.has_pending_migration(POSTGRES_MIGRATIONS),
    };
    r.map(|pending| !pending)
        .map_err(|e| StoreError::Migration(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backend_comes_from_the_scheme() {
        assert_eq!(backend_of("sqlite://x.db").unwrap(), Backend::Sqlite);
        assert_eq!(backend_of("postgres://u@h/db").unwrap(), Backend::Postgres);
        assert_eq!(
            backend_of("postgresql://u@h/db").unwrap(),
            Backend::Postgres
        );
        assert!(backend_of("gpuledger.db").is_err());
        assert!(backend_of("mysql://x").is_err());
        assert_eq!(sqlite_path("sqlite://demo-data/x.db"), "demo-data/x.db");
        assert_eq!(sqlite_path("sqlite:///tmp/x.db"), "/tmp/x.db");
        assert_eq!(redact("postgres://u:secret@h/db"), "postgres://u:***@h/db");
    }

    #[test]
    fn a_new_sqlite_file_and_its_journal_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ledger.db");
        let mut c = connect(&format!("sqlite://{}", path.display())).unwrap();
        migrate(&mut c).unwrap();
        for name in ["ledger.db", "ledger.db-wal", "ledger.db-shm"] {
            let mode = std::fs::metadata(dir.path().join(name))
                .unwrap_or_else(|e| panic!("{name}: {e}"))
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{name} has mode {:o}", mode & 0o777);
        }
    }
}
