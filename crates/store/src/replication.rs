//! Acknowledged means replicated, when there are replicas: `serve` refuses to start on a
//! PostgreSQL primary that streams to standbys none of which is synchronous, because a record
//! acknowledged there may be missing on the standby a failover promotes (and the log then
//! rewinds behind what was published: see [`super::high_water`]). Synchronous replication
//! (`synchronous_standby_names`, for two sites `ANY 1 (…)` quorum commit, with
//! `synchronous_commit` `on` or `remote_apply`) makes the commit, and so the answer, wait for a
//! standby. `allow_async_standbys` starts anyway, saying so. ops/postgresql.md has the set-up.

use super::conn::{self, Backend, DbConn};
use super::StoreError;
use diesel::sql_types::{BigInt, Text};
use diesel::RunQueryDsl;

/// What the primary says about its standbys (`pg_stat_replication`) and its commits.
#[derive(Debug, Clone, PartialEq, Eq, diesel::QueryableByName)]
pub struct Standbys {
    /// Standbys streaming from this server.
    #[diesel(sql_type = BigInt)]
    pub streaming: i64,
    /// Of those, the ones a commit waits for (`sync_state` `sync` or `quorum`).
    #[diesel(sql_type = BigInt)]
    pub synchronous: i64,
    /// Of those, the ones whose `sync_state` this role may not read (it needs
    /// `pg_read_all_stats` or superuser).
    #[diesel(sql_type = BigInt)]
    pub hidden: i64,
    /// `synchronous_commit`: `off`, `local`, `remote_write`, `on` or `remote_apply`.
    #[diesel(sql_type = Text)]
    pub synchronous_commit: String,
}

/// Whether a commit on a primary with these standbys survives the loss of the primary:
/// `Err` with the reason when it may not. No standbys: nothing to lose to a failover (a
/// single server's durability is its own fsync). The rule `serve` starts by.
pub fn check(s: &Standbys) -> Result<(), String> {
    if s.streaming == 0 {
        return Ok(());
    }
    if s.hidden > 0 && s.synchronous == 0 {
        return Err(format!(
            "{} standby(s) stream from this primary, but this role may not read whether they \
             are synchronous (grant it pg_read_all_stats)",
            s.streaming
        ));
    }
    if s.synchronous == 0 {
        return Err(format!(
            "{} standby(s) stream from this primary and none is synchronous: a record \
             acknowledged here may be lost when a standby is promoted; set \
             synchronous_standby_names (two sites: 'ANY 1 (…)')",
            s.streaming
        ));
    }
    if matches!(s.synchronous_commit.as_str(), "off" | "local") {
        return Err(format!(
            "synchronous_commit is {}: commits do not wait for the synchronous standby; set it \
             to on or remote_apply",
            s.synchronous_commit
        ));
    }
    Ok(())
}

/// Reads [`Standbys`] on a PostgreSQL connection.
pub fn standbys(conn: &mut DbConn) -> Result<Standbys, StoreError> {
    Ok(diesel::sql_query(
        "SELECT count(*)::bigint AS streaming, \
                count(*) FILTER (WHERE sync_state IN ('sync', 'quorum'))::bigint AS synchronous, \
                count(*) FILTER (WHERE sync_state IS NULL)::bigint AS hidden, \
                current_setting('synchronous_commit') AS synchronous_commit \
         FROM pg_stat_replication",
    )
    .get_result(conn)?)
}

/// Refuses (with the reason) a PostgreSQL `url` whose server has only asynchronous standbys;
/// SQLite has none.
pub fn refuse_async_standbys(url: &str) -> Result<(), StoreError> {
    if conn::backend_of(url)? != Backend::Postgres {
        return Ok(());
    }
    let mut c = conn::connect(url)?;
    let s = standbys(&mut c)?;
    check(&s).map_err(|why| {
        StoreError::Refused(format!(
            "{why}; or start with allow_async_standbys = true (--allow-async-standbys) to accept \
             that loss"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(streaming: i64, synchronous: i64, hidden: i64, commit: &str) -> Standbys {
        Standbys {
            streaming,
            synchronous,
            hidden,
            synchronous_commit: commit.into(),
        }
    }

    #[test]
    fn only_a_commit_that_waits_for_a_standby_passes() {
        assert!(check(&s(0, 0, 0, "on")).is_ok(), "no standby");
        assert!(check(&s(0, 0, 0, "off")).is_ok(), "no standby to lose to");
        assert!(check(&s(1, 1, 0, "on")).is_ok());
        assert!(check(&s(2, 1, 0, "remote_apply")).is_ok(), "quorum of one");
        assert!(check(&s(2, 1, 0, "remote_write")).is_ok());
        let e = check(&s(1, 0, 0, "on")).unwrap_err();
        assert!(e.contains("none is synchronous"), "{e}");
        let e = check(&s(1, 1, 0, "local")).unwrap_err();
        assert!(e.contains("synchronous_commit is local"), "{e}");
        assert!(check(&s(1, 1, 0, "off")).is_err());
        let e = check(&s(2, 0, 2, "on")).unwrap_err();
        assert!(e.contains("pg_read_all_stats"), "{e}");
    }
}
