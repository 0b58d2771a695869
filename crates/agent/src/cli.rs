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
