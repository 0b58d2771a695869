//! Which log the agent signs for. A record's signature names the log's origin
//! (docs/PROTOCOL.md §4.1), so the agent must know it before it signs anything. It learns it
//! from the ledger (`GET /v1/log`) at start-up, or from `origin` in its configuration (a pin),
//! and remembers it in the spool directory: the spooled records were signed for that log, and
//! the agent refuses to send them anywhere else.

use super::AgentError;
use std::path::Path;
use std::time::Duration;

/// The file in the spool directory that holds the origin the spool's records are signed for.
pub const ORIGIN_FILE: &str = "origin";

/// Longest wait between two attempts to learn the origin at start-up.
pub const MAX_ORIGIN_RETRY: Duration = Duration::from_secs(30);

/// Reads `GET <server_url>/v1/log` with the signer's client ([`super::tls::client`]) and
/// returns its `origin`.
pub fn fetch(http: &ureq::Agent, server_url: &str) -> Result<String, String> {
    let url = format!("{}/v1/log", server_url.trim_end_matches('/'));
    let mut resp = http.get(&url).call().map_err(|e| format!("{url}: {e}"))?;
    if resp.status() != 200 {
        return Err(format!("{url}: HTTP {}", resp.status()));
    }
    let v: serde_json::Value = resp
        .body_mut()
        .read_json()
        .map_err(|e| format!("{url}: {e}"))?;
    v.get("origin")
        .and_then(|o| o.as_str())
        .map(str::to_owned)
        .ok_or_else(|| format!("{url}: the answer has no origin"))
}

/// Decides the origin to sign for, without waiting for the ledger when it can: the pinned
/// one (which must equal the one the spool was signed for), else the spool's, else the
/// ledger's (`GET /v1/log`, retried with backoff until it answers). The result is remembered
/// in `spool_dir`. The sender checks the ledger's origin again before it sends anything
/// ([`check_ledger`]).
pub fn resolve(
    http: &ureq::Agent,
    server_url: &str,
    pinned: Option<&str>,
    spool_dir: &Path,
) -> Result<String, AgentError> {
    let file = spool_dir.join(ORIGIN_FILE);
    let io = |e: std::io::Error| AgentError::Io {
        path: file.clone(),
        source: e,
    };
    let stored = match std::fs::read_to_string(&file) {
        Ok(s) => Some(s.trim().to_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io(e)),
    };
    if let (Some(p), Some(s)) = (pinned, stored.as_deref()) {
        if p != s {
            return Err(AgentError::Config(format!(
                "the configured origin is {p:?}, but the spool's records were signed for {s:?}: records signed for one log are never sent to another (see docs/AGENT.md)"
            )));
        }
    }
    let origin = match pinned.map(str::to_owned).or(stored.clone()) {
        Some(o) => o,
        None => {
            let mut wait = Duration::from_secs(1);
            loop {
                match fetch(http, server_url) {
                    Ok(o) => break o,
                    Err(e) => {
                        tracing::warn!(error = %e, retry_in_s = wait.as_secs(), "cannot ask the ledger for its origin, and none is configured (`origin` in the configuration); nothing can be signed until it answers");
                        std::thread::sleep(wait);
                        wait = (wait * 2).min(MAX_ORIGIN_RETRY);
                    }
                }
            }
        }
    };
    if stored.is_none() {
        std::fs::create_dir_all(spool_dir).map_err(io)?;
        let tmp = spool_dir.join(format!("{ORIGIN_FILE}.tmp"));
        let write = || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(format!("{origin}\n").as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &file)?;
            std::fs::File::open(spool_dir)?.sync_all()
        };
        write().map_err(io)?;
    }
    Ok(origin)
}

/// What the ledger answered about its origin.
#[derive(Debug, PartialEq, Eq)]
pub enum LedgerOrigin {
    /// The ledger is the log the records are signed for.
    Same,
    /// The ledger is another log: nothing may be sent to it.
    Other(String),
    /// The ledger did not answer.
    Unknown(String),
}

/// Asks the ledger which log it is and compares with `origin`.
pub fn check_ledger(http: &ureq::Agent, server_url: &str, origin: &str) -> LedgerOrigin {
    match fetch(http, server_url) {
        Ok(o) if o == origin => LedgerOrigin::Same,
        Ok(o) => LedgerOrigin::Other(o),
        Err(e) => LedgerOrigin::Unknown(e),
    }
}
