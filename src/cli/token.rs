//! `gpuledger token`: API tokens, offline against the database. Secrets are printed once and
//! stored only as hashes.

use super::DbArgs;
use anyhow::{bail, Context, Result};
use clap::Subcommand;
use gpuledger::core::time::Timestamp;
use gpuledger::store::{self, access};
use std::process::ExitCode;

/// `token`'s subcommands.
#[derive(Subcommand)]
pub enum TokenCommand {
    /// Create a token; the secret is printed once and stored only as a hash.
    Create {
        #[command(flatten)]
        db: DbArgs,
        /// admin, auditor or tenant.
        #[arg(long)]
        role: String,
        /// The tenant of a tenant token.
        #[arg(long)]
        tenant: Option<String>,
        /// A note to recognise the token by.
        #[arg(long, default_value = "")]
        label: String,
        /// When the token stops working: a duration from now (`90d`, `12h`, `30m`, `3600s`,
        /// `2w`) or an RFC 3339 time (`2027-01-01T00:00:00Z`) [default: never].
        #[arg(long, value_name = "DURATION|TIME")]
        expires: Option<String>,
    },
    /// List tokens (never their secrets).
    List {
        #[command(flatten)]
        db: DbArgs,
    },
    /// Revoke a token by id.
    Revoke {
        #[command(flatten)]
        db: DbArgs,
        id: String,
    },
}

/// Runs one `token` subcommand.
pub fn run(cmd: TokenCommand) -> Result<ExitCode> {
    match cmd {
        TokenCommand::Create {
            db,
            role,
            tenant,
            label,
            expires,
        } => {
            let expires_at = expires
                .as_deref()
                .map(|e| parse_expiry(e, Timestamp::now()))
                .transpose()?;
            create(&db, &role, tenant.as_deref(), &label, expires_at)?
        }
        TokenCommand::List { db } => list(&db)?,
        TokenCommand::Revoke { db, id } => {
            access::revoke_token(&mut store::connect(&db.database_url)?, &id)?;
            println!("token {id} revoked");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn create(
    db: &DbArgs,
    role: &str,
    tenant: Option<&str>,
    label: &str,
    expires_at: Option<Timestamp>,
) -> Result<()> {
    let role = access::ApiRole::parse(role).context("--role must be admin, auditor or tenant")?;
    let mut conn = store::connect(&db.database_url)?;
    let (t, secret) = access::create_token_expiring(&mut conn, role, tenant, label, expires_at)?;
    println!("{secret}");
    eprintln!(
        "token {} ({}) created{}; the secret above is shown once",
        t.id,
        t.role.as_str(),
        t.expires_at
            .map(|e| format!(", expiring at {e}"))
            .unwrap_or_default()
    );
    Ok(())
}

/// Longest `--expires` duration: 100 years.
const MAX_EXPIRY_SECONDS: i64 = 100 * 365 * 86_400;

/// `--expires`: a duration from `now` (a whole number and one of `s`, `m`, `h`, `d`, `w`) or
/// an RFC 3339 time (fractions of a second are dropped).
fn parse_expiry(s: &str, now: Timestamp) -> Result<Timestamp> {
    let s = s.trim();
    if let Some(unit) = s.chars().last().filter(char::is_ascii_alphabetic) {
        let number = &s[..s.len() - 1];
        if !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()) {
            let scale = match unit {
                's' => 1,
                'm' => 60,
                'h' => 3_600,
                'd' => 86_400,
                'w' => 7 * 86_400,
                _ => bail!("--expires {s:?}: the unit must be s, m, h, d or w"),
            };
            let seconds = number
                .parse::<i64>()
                .ok()
                .and_then(|n| n.checked_mul(scale))
                .filter(|n| (1..=MAX_EXPIRY_SECONDS).contains(n))
                .with_context(|| {
                    format!("--expires {s:?}: between 1 s and {MAX_EXPIRY_SECONDS} s")
                })?;
            return Ok(now.plus(seconds));
        }
    }
    let t = time::OffsetDateTime::parse(s, &time::format_description::well_known::Rfc3339)
        .with_context(|| {
            format!("--expires {s:?}: neither a duration (90d, 12h, 30m) nor an RFC 3339 time")
        })?;
    Timestamp::from_unix(t.unix_timestamp())
        .with_context(|| format!("--expires {s:?}: out of range"))
}

fn list(db: &DbArgs) -> Result<()> {
    let mut conn = store::connect(&db.database_url)?;
    let now = Timestamp::now();
    for t in access::list_tokens(&mut conn)? {
        let expiry = match t.expires_at {
            Some(e) if t.expired(now) => format!("  (expired {e})"),
            Some(e) => format!("  (expires {e})"),
            None => String::new(),
        };
        println!(
            "{}  {:8} {:20} {}  {}{}{}",
            t.id,
            t.role.as_str(),
            t.tenant.as_deref().unwrap_or("-"),
            t.created_at,
            t.label,
            t.revoked_at
                .map(|r| format!("  (revoked {r})"))
                .unwrap_or_default(),
            expiry
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_is_a_duration_or_an_rfc3339_time() {
        let now = Timestamp::parse("2026-12-01T00:00:00Z").unwrap();
        let at = |s| parse_expiry(s, now).map(|t| t.to_string());
        assert_eq!(at("90s").unwrap(), "2026-12-01T00:01:30Z");
        assert_eq!(at("30m").unwrap(), "2026-12-01T00:30:00Z");
        assert_eq!(at("12h").unwrap(), "2026-12-01T12:00:00Z");
        assert_eq!(at("2d").unwrap(), "2026-12-03T00:00:00Z");
        assert_eq!(at("1w").unwrap(), "2026-12-08T00:00:00Z");
        assert_eq!(at("2027-01-01T00:00:00Z").unwrap(), "2027-01-01T00:00:00Z");
        assert_eq!(
            at("2027-01-01T02:00:00.75+02:00").unwrap(),
            "2027-01-01T00:00:00Z"
        );
        for bad in ["", "d", "0s", "-1d", "3y", "1.5h", "tomorrow", "2027-01-01"] {
            assert!(at(bad).is_err(), "{bad:?} accepted");
        }
    }
}
