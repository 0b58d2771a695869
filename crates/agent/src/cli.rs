//! The command line of the node agent and the market signer, shared by `gpuledger-agent` and
//! `gpuledger agent` / `gpuledger market` / `gpuledger keygen`.

use crate::config::TlsConfig;
use crate::AgentError;
use clap::Args;
use gpuledger_core::keys;
use gpuledger_shell::{keyfile, logging};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// `agent`'s arguments.
#[derive(Args, Debug)]
pub struct AgentArgs {
    /// The agent's TOML file.
    #[arg(long, env = "GPULEDGER_AGENT_CONFIG", default_value = "agent.toml")]
    pub config: PathBuf,
    /// Serve the agent's Prometheus metrics at http://ADDR/metrics (wins over the file's
    /// `metrics_listen`) [default: none].
    #[arg(long, env = "GPULEDGER_AGENT_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,
    /// Trust the CA certificates of this PEM file, instead of the system's, for an https://
    /// ledger (wins over the file's `[tls] ca_file`) [default: the system's CA bundle].
    #[arg(long, env = "GPULEDGER_AGENT_CA_FILE", value_name = "PEM")]
    pub ca_file: Option<PathBuf>,
    /// Accept only the ledger certificate with this SHA-256 (of its DER bytes, hex), besides a
    /// valid chain (wins over the file's `[tls] pin_sha256`) [default: no pin].
    #[arg(long, env = "GPULEDGER_AGENT_PIN_SHA256", value_name = "HEX")]
    pub pin_sha256: Option<String>,
}

/// `market`'s arguments.
#[derive(Args, Debug)]
pub struct MarketArgs {
    /// The market signer's TOML file.
    #[arg(long, env = "GPULEDGER_MARKET_CONFIG", default_value = "market.toml")]
    pub config: PathBuf,
    /// Trust the CA certificates of this PEM file, instead of the system's, for an https://
    /// ledger (wins over the file's `[tls] ca_file`) [default: the system's CA bundle].
    #[arg(long, env = "GPULEDGER_MARKET_CA_FILE", value_name = "PEM")]
    pub ca_file: Option<PathBuf>,
    /// Accept only the ledger certificate with this SHA-256 (of its DER bytes, hex), besides a
    /// valid chain (wins over the file's `[tls] pin_sha256`) [default: no pin].
    #[arg(long, env = "GPULEDGER_MARKET_PIN_SHA256", value_name = "HEX")]
    pub pin_sha256: Option<String>,
}

/// `keygen`'s arguments.
#[derive(Args, Debug)]
pub struct KeygenArgs {
    /// Where to write the private key.
    #[arg(long, short)]
    pub out: PathBuf,
}

/// Arguments of `gpuledger-agent leases`.
#[derive(Args)]
pub struct LeasesArgs {
    /// The agent's TOML file (its node, lease file and collector).
    #[arg(long, env = "GPULEDGER_AGENT_CONFIG", default_value = "agent.toml")]
    pub config: PathBuf,
    /// The start of the leases' term (RFC 3339, UTC, whole seconds) [default: now].
    #[arg(long)]
    pub from: Option<String>,
    /// The end of the leases' term [default: none, open-ended].
    #[arg(long)]
    pub to: Option<String>,
    /// The leases' billing class: on_demand, reserved or spot.
    #[arg(long, default_value = "on_demand")]
    pub class: String,
}

/// Prints, one JSON object a line, the `POST /v1/leases` body of each lease of the node's
/// lease file: the GPUs the file gives it on this node (a `whole_node` lease: every GPU the
/// collector reads now), for the term and class given. The ledger bills a record only under a
/// registered lease that covers it, so the registration and the file must agree.
pub fn leases(args: LeasesArgs) -> Result<(), AgentError> {
    use gpuledger_core::record::{Body, Kind};
    let cfg = crate::config::AgentConfig::read(&args.config)?;
    let leases = crate::lease::read(&cfg.lease_file)
        .map_err(AgentError::Config)?
        .ok_or_else(|| {
            AgentError::Config(format!("{}: no such lease file", cfg.lease_file.display()))
        })?;
    let now = gpuledger_core::time::Timestamp::now();
    let gpus: Vec<u32> = crate::collector::from_config(&cfg.collector)?
        .read(now)?
        .gpus
        .iter()
        .map(|g| g.index)
        .collect();
    for l in &leases {
        let mut body = serde_json::json!({
            "lease": l.id,
            "tenant": l.tenant,
            "class": args.class,
            "from": args.from.clone().unwrap_or_else(|| now.to_string()),
            "nodes": l.registration_items(&cfg.node, &gpus),
        });
        if let Some(to) = &args.to {
            body["to"] = to.clone().into();
        }
        // Validated as the ledger will validate it, so a bad --from or --class fails here.
        let checked = Body::from_value(Kind::LeaseRegistered, &body)
            .map_err(|r| AgentError::Config(format!("lease {}: {r}", l.id)))?;
        println!(
            "{}",
            serde_json::to_string(&checked.to_value()).expect("serialises")
        );
    }
    Ok(())
}

/// Runs a node agent until SIGTERM or Ctrl-C.
pub fn agent(args: AgentArgs) -> Result<(), AgentError> {
    logging::init();
    let tls = TlsConfig {
        ca_file: args.ca_file,
        pin_sha256: args.pin_sha256,
    };
    crate::run::run_from_config(&args.config, args.metrics_listen, tls)
}

/// Runs a market signer until SIGTERM or Ctrl-C.
pub fn market(args: MarketArgs) -> Result<(), AgentError> {
    logging::init();
    let tls = TlsConfig {
        ca_file: args.ca_file,
        pin_sha256: args.pin_sha256,
    };
    crate::market::run_from_config(&args.config, tls)
}

/// Writes a new Ed25519 key (private 0600, public next to it) and prints where, its id and its
/// public key, never the private key.
pub fn keygen(args: KeygenArgs) -> Result<(), keyfile::KeyFileError> {
    let key = keyfile::generate();
    let public = keyfile::write_new(&args.out, &key)?;
    print_new_key(&args.out, &public, &key.verifying_key());
    Ok(())
}

fn print_new_key(private: &Path, public: &Path, key: &ed25519_dalek::VerifyingKey) {
    println!("private key: {} (mode 0600)", private.display());
    println!("public key:  {} ", public.display());
    println!("key id:      {}", keys::key_id(key));
    println!("{}", keys::encode_public(key));
}
