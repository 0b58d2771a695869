//! `gpuledger token`: API tokens, offline against the database. Secrets are printed once and
//! stored only as hashes.

use super::DbArgs;
use anyhow::{Context, Result};
use clap::Subcommand;
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
        } => create(&db, &role, tenant.as_deref(), &label)?,
        TokenCommand::List { db } => list(&db)?,
        TokenCommand::Revoke { db, id } => {
            access::revoke_token(&mut store::connect(&db.database_url)?, &id)?;
            println!("token {id} revoked");
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn create(db: &DbArgs, role: &str, tenant: Option<&str>, label: &str) -> Result<()> {
    let role = access::ApiRole::parse(role).context("--role must be admin, auditor or tenant")?;
    let mut conn = store::connect(&db.database_url)?;
    let (t, secret) = access::create_token(&mut conn, role, tenant, label)?;
    println!("{secret}");
    eprintln!(
        "token {} ({}) created; the secret above is shown once",
        t.id,
        t.role.as_str()
    );
    Ok(())
}

fn list(db: &DbArgs) -> Result<()> {
    let mut conn = store::connect(&db.database_url)?;
    for t in access::list_tokens(&mut conn)? {
        println!(
            "{}  {:8} {:20} {}  {}{}",
            t.id,
            t.role.as_str(),
            t.tenant.as_deref().unwrap_or("-"),
            t.created_at,
            t.label,
            t.revoked_at
                .map(|r| format!("  (revoked {r})"))
                .unwrap_or_default()
        );
    }
    Ok(())
}
