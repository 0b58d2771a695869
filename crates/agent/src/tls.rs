//! How a signer reaches the ledger: one HTTP client, and for an `https://` ledger TLS with
//! rustls and its ring provider (no system OpenSSL). docs/AGENT.md, "TLS", is the operator's
//! view of this module.
//!
//! **Trust.** By default the system's CA bundle: the first of [`SYSTEM_CA_BUNDLES`] that exists,
//! the file the distribution's `ca-certificates` package keeps up to date, so a CA the operator
//! installs there is trusted and one the distribution withdraws stops being trusted with the
//! next OS update. With `[tls] ca_file` the certificates of that PEM file are trusted instead:
//! the system's are then not trusted at all. The bundle is read here rather than through
//! `rustls-native-certs` or ureq's `platform-verifier` feature: on Linux both read these same
//! files, found through the `openssl-probe` crate, which links nothing but whose name the
//! "no OpenSSL in the agent" check of the crate boundaries cannot tell from OpenSSL's. Not
//! `webpki-roots` either: Mozilla's list frozen into the binary ignores the CAs an operator
//! installs and ages with the release.
//!
//! **Pin.** With `[tls] pin_sha256` the ledger must also present exactly the certificate whose
//! SHA-256, over the certificate's DER bytes, is configured (what
//! `openssl x509 -in cert.pem -outform DER | sha256sum` prints). The pin is checked after the
//! chain, never instead of it ([`LedgerVerifier`]): a certificate that matches the pin but does
//! not chain to a trusted CA is refused, and so is one that chains but does not match. The pin
//! is of the leaf certificate, not of its key: renewing the ledger's certificate changes it.
//!
//! ureq 3 has no setting for a certificate verifier of one's own, so `https://` connections go
//! through [`RustlsConnector`], a connector written against ureq's `unversioned` transport API (the
//! one ureq's own rustls connector is written against). That API is outside ureq's semver
//! promise: a ureq upgrade may need this module adapted (tests/tls.rs exercises it end to end).
//! `http://` URLs keep ureq's default connector.

use crate::config::TlsConfig;
use crate::AgentError;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, ClientConnection, DigitallySignedStruct, DistinguishedName,
    OtherError, RootCertStore, SignatureScheme, StreamOwned,
};
use sha2::{Digest, Sha256};
use std::fmt;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use ureq::unversioned::resolver::DefaultResolver;
use ureq::unversioned::transport::{
    Buffers, ConnectProxyConnector, ConnectionDetails, Connector, Either, LazyBuffers, NextTimeout,
    TcpConnector, Transport, TransportAdapter,
};

/// Where the system's CA bundle is looked for, in this order: Debian, Ubuntu, Arch, Gentoo and
/// Alpine; Fedora, RHEL and CentOS; RHEL's extracted trust store; openSUSE; Alpine and the BSDs.
pub const SYSTEM_CA_BUNDLES: [&str; 5] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// Largest CA file read, in bytes (a distribution's whole bundle is about 0.2 MiB).
pub const MAX_CA_FILE_BYTES: u64 = 8 * 1024 * 1024;

/// A SHA-256 fingerprint of a DER certificate: the form of `[tls] pin_sha256`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Pin([u8; 32]);

impl Pin {
    /// Reads a fingerprint: 64 hexadecimal digits, either case, optionally in pairs separated
    /// by `:` (as `openssl x509 -fingerprint -sha256` prints it).
    pub fn parse(text: &str) -> Result<Pin, String> {
        let digits: String = text.trim().chars().filter(|c| *c != ':').collect();
        let mut bytes = [0u8; 32];
        hex::decode_to_slice(&digits, &mut bytes).map_err(|_| {
            format!("{text:?} is not a SHA-256 fingerprint (64 hexadecimal digits)")
        })?;
        Ok(Pin(bytes))
    }

    /// The fingerprint of a certificate, from its DER bytes.
    pub fn of_certificate(der: &[u8]) -> Pin {
        Pin(Sha256::digest(der).into())
    }
}

impl fmt::Display for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode(self.0))
    }
}

impl fmt::Debug for Pin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Pin({self})")
    }
}

/// The ledger presented a certificate other than the pinned one.
#[derive(Debug, thiserror::Error)]
#[error("the ledger's certificate does not match [tls] pin_sha256: expected {expected}, found {found} (SHA-256 of the DER certificate)")]
pub struct PinMismatch {
    /// The configured pin.
    pub expected: Pin,
    /// The fingerprint of the certificate the ledger presented.
    pub found: Pin,
}

/// The HTTP client a signer reaches the ledger at `server_url` with, each request bounded by
/// `timeout`; non-2xx answers are answers, not errors. For `https://`, TLS trusting the
/// system's CAs or `tls.ca_file`'s, and checking `tls.pin_sha256` when set (module docs).
/// Built once at start-up and shared by the origin checks and the sender, so a CA file that
/// cannot be read or a malformed pin stops the start.
pub fn client(
    server_url: &str,
    tls: &TlsConfig,
    timeout: Duration,
) -> Result<ureq::Agent, AgentError> {
    let pin = tls.validate(server_url)?;
    let config = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build();
    if !server_url.starts_with("https://") {
        return Ok(config.into());
    }
    let roots = match &tls.ca_file {
        Some(path) => ca_file_roots(path)?,
        None => system_roots()?,
    };
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .map_err(|e| AgentError::Config(format!("TLS: {e}")))?;
    let tls_config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| AgentError::Config(format!("TLS: {e}")))?
        // Not a weaker check: the verifier is rustls's own WebPKI one, with the pin after it.
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(LedgerVerifier { chain, pin }))
        .with_no_client_auth();
    let connector =
        ().chain(ConnectProxyConnector::default())
            .chain(TcpConnector::default())
            .chain(RustlsConnector::new(
                Arc::new(tls_config),
                ledger_handshake_failed,
            ));
    Ok(ureq::Agent::with_parts(
        config,
        connector,
        DefaultResolver::default(),
    ))
}

/// The certificates of a PEM file, at most [`MAX_CA_FILE_BYTES`]; none is an error.
fn read_certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, AgentError> {
    let io = |e: std::io::Error| AgentError::Io {
        path: path.to_owned(),
        source: e,
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(io)?
        .take(MAX_CA_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_CA_FILE_BYTES {
        return Err(AgentError::Config(format!(
            "{}: larger than {MAX_CA_FILE_BYTES} bytes",
            path.display()
        )));
    }
    let certs = CertificateDer::pem_slice_iter(&bytes)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| AgentError::Config(format!("{}: {e}", path.display())))?;
    if certs.is_empty() {
        return Err(AgentError::Config(format!(
            "{}: holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        )));
    }
    Ok(certs)
}

/// `[tls] ca_file`: every certificate in it must be usable as a trust anchor.
fn ca_file_roots(path: &Path) -> Result<RootCertStore, AgentError> {
    let mut roots = RootCertStore::empty();
    for (i, cert) in read_certificates(path)?.into_iter().enumerate() {
        roots.add(cert).map_err(|e| {
            AgentError::Config(format!(
                "{}: certificate {} cannot be a trusted CA: {e}",
                path.display(),
                i + 1
            ))
        })?;
    }
    Ok(roots)
}

/// The system's CA bundle (the first of [`SYSTEM_CA_BUNDLES`] that exists); certificates in it
/// that webpki cannot use are skipped, as every TLS library skips them.
fn system_roots() -> Result<RootCertStore, AgentError> {
    let Some(path) = SYSTEM_CA_BUNDLES
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
    else {
        return Err(AgentError::Config(format!(
            "server_url is https:// and [tls] ca_file is not set, but no system CA bundle was found ({}): install the ca-certificates package, or set [tls] ca_file",
            SYSTEM_CA_BUNDLES.join(", ")
        )));
    };
    let mut roots = RootCertStore::empty();
    let (added, skipped) = roots.add_parsable_certificates(read_certificates(path)?);
    if added == 0 {
        return Err(AgentError::Config(format!(
            "{}: no usable CA certificate in the system bundle; set [tls] ca_file",
            path.display()
        )));
    }
    tracing::debug!(bundle = %path.display(), added, skipped, "trusting the system's CAs");
    Ok(roots)
}

/// rustls's WebPKI verifier (chain to a trusted CA, validity dates, the ledger's host name or
/// IP address), then the pin when one is set.
#[derive(Debug)]
struct LedgerVerifier {
    chain: Arc<WebPkiServerVerifier>,
    pin: Option<Pin>,
}

impl ServerCertVerifier for LedgerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let verified = self.chain.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        )?;
        if let Some(expected) = self.pin {
            let found = Pin::of_certificate(end_entity.as_ref());
            if found != expected {
                return Err(CertificateError::Other(OtherError(Arc::new(PinMismatch {
                    expected,
                    found,
                })))
                .into());
            }
        }
        Ok(verified)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }

    fn root_hint_subjects(&self) -> Option<&[DistinguishedName]> {
        self.chain.root_hint_subjects()
    }
}

/// A failed TLS handshake with the ledger, as the sender logs it.
#[derive(Debug, thiserror::Error)]
#[error("TLS with {host}: {reason}")]
struct HandshakeFailed {
    host: String,
    reason: String,
}

fn handshake_failed(host: &str, e: &rustls::Error) -> ureq::Error {
    let reason = match e {
        rustls::Error::InvalidCertificate(CertificateError::Other(OtherError(inner))) => {
            inner.to_string()
        }
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => format!(
            "{e}: the ledger's certificate does not chain to a trusted CA (the system's, or [tls] ca_file's when set)"
        ),
        _ => e.to_string(),
    };
    ureq::Error::Other(Box::new(HandshakeFailed {
        host: host.to_owned(),
        reason,
    }))
}

/// Why a TLS handshake failed, for the [`RustlsConnector`]'s owner to word.
#[derive(Debug)]
pub enum HandshakeError {
    /// The host is not a DNS name or IP address rustls accepts.
    Name(String),
    /// rustls refused the handshake (a certificate, a protocol error).
    Tls(rustls::Error),
    /// The connection failed under it (a timeout, a closed socket).
    Io(std::io::Error),
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::Name(m) => f.write_str(m),
            HandshakeError::Tls(e) => e.fmt(f),
            HandshakeError::Io(e) => e.fmt(f),
        }
    }
}

/// A ureq connector that wraps an `https://` connection in TLS with a rustls configuration of
/// its owner's (the agent's [`LedgerVerifier`], the server's webhook client); other
/// connections pass through. `fail` words a failed handshake with a host as ureq's error.
pub struct RustlsConnector {
    config: Arc<ClientConfig>,
    fail: fn(&str, HandshakeError) -> ureq::Error,
}

impl RustlsConnector {
    /// The connector for `config`, reporting failed handshakes through `fail`.
    pub fn new(config: Arc<ClientConfig>, fail: fn(&str, HandshakeError) -> ureq::Error) -> Self {
        RustlsConnector { config, fail }
    }
}

impl fmt::Debug for RustlsConnector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RustlsConnector").finish_non_exhaustive()
    }
}

impl<In: Transport> Connector<In> for RustlsConnector {
    type Out = Either<In, TlsTransport>;

    fn connect(
        &self,
        details: &ConnectionDetails,
        chained: Option<In>,
    ) -> Result<Option<Self::Out>, ureq::Error> {
        let Some(transport) = chained else {
            return Ok(None);
        };
        if !details.needs_tls() || transport.is_tls() {
            return Ok(Some(Either::A(transport)));
        }
        let host = details.uri.authority().map_or("", |a| a.host());
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let fail = |e| (self.fail)(host, e);
        let name = ServerName::try_from(bare.to_owned())
            .map_err(|e| fail(HandshakeError::Name(e.to_string())))?;
        let mut conn = ClientConnection::new(self.config.clone(), name)
            .map_err(|e| fail(HandshakeError::Tls(e)))?;
        let mut sock = TransportAdapter::new(transport.boxed(), details.current_time.clone());
        sock.set_timeout(details.timeout);
        if let Err(e) = conn.complete_io(&mut sock) {
            return Err(fail(
                match e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>()) {
                    Some(tls) => HandshakeError::Tls(tls.clone()),
                    None => HandshakeError::Io(e),
                },
            ));
        }
        Ok(Some(Either::B(TlsTransport::new(conn, sock, details))))
    }
}

/// How the agent words a failed handshake with the ledger: ureq's own error for a timeout or
/// a closed socket, else [`HandshakeFailed`].
fn ledger_handshake_failed(host: &str, e: HandshakeError) -> ureq::Error {
    match e {
        HandshakeError::Name(reason) => ureq::Error::Other(Box::new(HandshakeFailed {
            host: host.to_owned(),
            reason,
        })),
        HandshakeError::Tls(e) => handshake_failed(host, &e),
        HandshakeError::Io(e) => e.into(),
    }
}

/// An established TLS connection, as ureq's transport: also what the server's webhook
/// connector hands ureq after its own handshake.
pub struct TlsTransport {
    buffers: LazyBuffers,
    stream: StreamOwned<ClientConnection, TransportAdapter>,
}

impl TlsTransport {
    /// The transport over `conn` (handshake done) on `sock`, with the buffer sizes of
    /// `details`' configuration.
    pub fn new(
        conn: ClientConnection,
        sock: TransportAdapter,
        details: &ConnectionDetails,
    ) -> Self {
        TlsTransport {
            buffers: LazyBuffers::new(
                details.config.input_buffer_size(),
                details.config.output_buffer_size(),
            ),
            stream: StreamOwned { conn, sock },
        }
    }
}

impl fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsTransport").finish_non_exhaustive()
    }
}

impl Transport for TlsTransport {
    fn buffers(&mut self) -> &mut dyn Buffers {
        &mut self.buffers
    }

    fn transmit_output(&mut self, amount: usize, timeout: NextTimeout) -> Result<(), ureq::Error> {
        self.stream.sock.set_timeout(timeout);
        self.stream.write_all(&self.buffers.output()[..amount])?;
        Ok(())
    }

    fn await_input(&mut self, timeout: NextTimeout) -> Result<bool, ureq::Error> {
        self.stream.sock.set_timeout(timeout);
        let amount = self.stream.read(self.buffers.input_append_buf())?;
        self.buffers.input_appended(amount);
        Ok(amount > 0)
    }

    fn is_open(&mut self) -> bool {
        self.stream.sock.get_mut().is_open()
    }

    fn is_tls(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pins_read_in_the_forms_sha256sum_and_openssl_print() {
        let der = b"not really a certificate";
        let pin = Pin::of_certificate(der);
        let hex = pin.to_string();
        assert_eq!(hex.len(), 64);
        assert_eq!(Pin::parse(&hex).unwrap(), pin);
        assert_eq!(
            Pin::parse(&format!("  {}\n", hex.to_uppercase())).unwrap(),
            pin
        );
        let colons = hex
            .as_bytes()
            .chunks(2)
            .map(|p| std::str::from_utf8(p).unwrap().to_uppercase())
            .collect::<Vec<_>>()
            .join(":");
        assert_eq!(Pin::parse(&colons).unwrap(), pin);
        for bad in ["", &hex[..62], &format!("{hex}00"), &hex.replace('a', "g")] {
            let e = Pin::parse(bad).unwrap_err();
            assert!(e.contains("64 hexadecimal digits"), "{e}");
        }
    }

    #[test]
    fn a_ca_file_is_read_up_to_its_limit_and_refused_past_it() {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let pem = ca.self_signed(&key).unwrap().pem();
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ca.pem");
        // Padded with blank lines to exactly the limit: read.
        let mut text = pem.into_bytes();
        text.resize(MAX_CA_FILE_BYTES as usize, b'\n');
        std::fs::write(&file, &text).unwrap();
        assert_eq!(ca_file_roots(&file).unwrap().len(), 1);
        // One byte more: refused, naming the file.
        text.push(b'\n');
        std::fs::write(&file, &text).unwrap();
        let e = ca_file_roots(&file).unwrap_err().to_string();
        assert!(e.contains("ca.pem") && e.contains("larger than"), "{e}");
    }

    #[test]
    fn a_ca_file_without_certificates_is_refused_with_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ca.pem");
        std::fs::write(&file, "not a certificate\n").unwrap();
        let e = ca_file_roots(&file).unwrap_err().to_string();
        assert!(
            e.contains("ca.pem") && e.contains("no PEM certificate"),
            "{e}"
        );
        let e = ca_file_roots(&dir.path().join("missing.pem"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing.pem"), "{e}");
    }
}
