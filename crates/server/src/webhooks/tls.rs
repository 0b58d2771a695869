//! `https://` webhook targets: rustls with its ring provider (no OpenSSL), rustls's own WebPKI
//! verifier over the system's CA bundle (the first of the agent's
//! `SYSTEM_CA_BUNDLES` that exists, the file the distribution keeps current).
//!
//! ureq 3's own rustls connector is behind a feature that would also change how the verifier
//! and the agent build their clients, so, as the agent does (`gpuledger_agent::tls`), the
//! connection goes through a connector written against ureq's `unversioned` transport API,
//! chained after ureq's TCP connector, which connects to the addresses
//! [`super::ssrf::PinnedResolver`] checked.

use gpuledger_agent::tls::RustlsConnector;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::{ClientConfig, RootCertStore};
use std::io::Read;
use std::sync::{Arc, OnceLock};

/// Largest CA bundle read, in bytes.
const MAX_CA_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// The TLS client configuration, built once: the system's CAs, TLS 1.2 and 1.3.
pub fn client_config() -> Result<Arc<ClientConfig>, String> {
    static CONFIG: OnceLock<Result<Arc<ClientConfig>, String>> = OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let path = gpuledger_agent::tls::SYSTEM_CA_BUNDLES
                .iter()
                .find(|p| std::path::Path::new(p).exists())
                .ok_or("no system CA bundle found for https webhook targets")?;
            let mut bytes = Vec::new();
            std::fs::File::open(path)
                .and_then(|f| f.take(MAX_CA_FILE_BYTES).read_to_end(&mut bytes))
                .map_err(|e| format!("{path}: {e}"))?;
            let mut roots = RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(&bytes) {
                let cert = cert.map_err(|e| format!("{path}: {e}"))?;
                // A certificate the store cannot use is skipped, as browsers do.
                let _ = roots.add(cert);
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .map_err(|e| format!("TLS: {e}"))?
                .with_root_certificates(roots)
                .with_no_client_auth();
            Ok(Arc::new(config))
        })
        .clone()
}

/// The TLS connector of webhook deliveries: the agent's connector (one implementation of
/// ureq's transport API), its failures worded as webhook delivery errors.
pub fn connector(config: Arc<ClientConfig>) -> RustlsConnector {
    RustlsConnector::new(config, |host, e| {
        ureq::Error::Io(std::io::Error::other(format!(
            "TLS handshake with {host} failed: {e}"
        )))
    })
}
