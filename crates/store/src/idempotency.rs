//! Idempotency keys of admin writes (`Idempotency-Key`, docs/PROTOCOL.md §6.8): the first answer
//! to a (caller, key) is kept at least [`RETENTION_SECONDS`], and the same request sent again
//! gets it again instead of being run twice. Not log entries: written on the account
//! connection ([`crate::Ledger::with_account_writer`]).

use crate::conn::DbConn;
use crate::error::StoreError;
use crate::schema::idempotency_keys;
use diesel::prelude::*;

/// How long a key's answer is kept (35 days, the log policy's default record age).
pub const RETENTION_SECONDS: i64 = 35 * 86_400;

/// A request still running after this long is taken as abandoned (its server stopped before
/// it answered): the key may be used again. Its write may or may not have happened.
pub const ABANDONED_AFTER_SECONDS: i64 = 120;

/// A key's row.
#[derive(Queryable)]
struct Kept {
    fingerprint: String,
    status: Option<i64>,
    content_type: Option<String>,
    body: Option<Vec<u8>>,
    created_at: i64,
}

/// What to do with a request that carries an idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key is new (or its request was abandoned): run the request, then
    /// [`complete`] or [`release`].
    Run,
    /// The same request was answered: this answer again.
    Replay {
        status: u16,
        content_type: Option<String>,
        body: Vec<u8>,
    },
    /// The key was used for another request (another method, path, query or body).
    Reused,
    /// The same key's first request is still running.
    InFlight,
}

/// Claims `key` of `scope` for a request whose fingerprint is `fingerprint`, at `now`
/// (unix seconds); drops keys older than [`RETENTION_SECONDS`] on the way.
pub fn claim(
    conn: &mut DbConn,
    scope: &str,
    key: &str,
    fingerprint: &str,
    now: i64,
) -> Result<Claim, StoreError> {
    conn.transaction(|conn| {
        diesel::delete(
            idempotency_keys::table
                .filter(idempotency_keys::created_at.lt(now - RETENTION_SECONDS)),
        )
        .execute(conn)?;
        let found: Option<Kept> = idempotency_keys::table
            .find((scope, key))
            .select((
                idempotency_keys::fingerprint,
                idempotency_keys::status,
                idempotency_keys::content_type,
                idempotency_keys::body,
                idempotency_keys::created_at,
            ))
            .first(conn)
            .optional()?;
        let Some(Kept {
            fingerprint: fp,
            status,
            content_type,
            body,
            created_at,
        }) = found
        else {
            diesel::insert_into(idempotency_keys::table)
                .values((
                    idempotency_keys::scope.eq(scope),
                    idempotency_keys::key.eq(key),
                    idempotency_keys::fingerprint.eq(fingerprint),
                    idempotency_keys::created_at.eq(now),
                ))
                .execute(conn)?;
            return Ok(Claim::Run);
        };
        if fp != fingerprint {
            return Ok(Claim::Reused);
        }
        if let Some(status) = status {
            return Ok(Claim::Replay {
                status: u16::try_from(status).unwrap_or(500),
                content_type,
                body: body.unwrap_or_default(),
            });
        }
        if created_at > now - ABANDONED_AFTER_SECONDS {
            return Ok(Claim::InFlight);
        }
        diesel::update(idempotency_keys::table.find((scope, key)))
            .set(idempotency_keys::created_at.eq(now))
            .execute(conn)?;
        Ok(Claim::Run)
    })
}

/// Keeps the answer to the request that claimed `key`.
pub fn complete(
    conn: &mut DbConn,
    scope: &str,
    key: &str,
    status: u16,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<(), StoreError> {
    diesel::update(idempotency_keys::table.find((scope, key)))
        .set((
            idempotency_keys::status.eq(Some(i64::from(status))),
            idempotency_keys::content_type.eq(content_type),
            idempotency_keys::body.eq(Some(body)),
        ))
        .execute(conn)?;
    Ok(())
}

/// Forgets `key` whose request was not done (refused or failed): it may be sent again,
/// corrected, under the same key.
pub fn release(conn: &mut DbConn, scope: &str, key: &str) -> Result<(), StoreError> {
    diesel::delete(
        idempotency_keys::table
            .find((scope, key))
            .filter(idempotency_keys::status.is_null()),
    )
    .execute(conn)?;
    Ok(())
}
