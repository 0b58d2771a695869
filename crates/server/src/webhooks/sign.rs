//! Standard Webhooks signatures. The signed content is `{webhook-id}.{webhook-timestamp}.{body}`;
//! `webhook-signature` holds space-separated `<version>,<base64 signature>` items:
//!
//! - `v1a`: Ed25519 (`ed25519-dalek`) with the service's key. The key file holds
//!   `whsk_<base64 of the 32-byte seed>` (mode 0600, created on first start, never logged);
//!   the public key is published as `whpk_<base64 of the 32-byte key>`.
//! - `v1`: HMAC-SHA256 (RustCrypto `hmac`) with the endpoint's secret, `whsec_<base64 of
//!   ≥ 24 random bytes>`; the key is the decoded bytes after the prefix.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine;
use ed25519_dalek::{Signer, SigningKey};
use hmac::{Hmac, Mac};
use rand_core::RngCore;
use sha2::Sha256;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Prefix of a v1a private key.
pub const SECRET_KEY_PREFIX: &str = "whsk_";
/// Prefix of a v1a public key.
pub const PUBLIC_KEY_PREFIX: &str = "whpk_";
/// Prefix of a v1 (HMAC) secret.
pub const HMAC_SECRET_PREFIX: &str = "whsec_";
/// Random bytes of a generated HMAC secret (the spec asks for 24 to 64).
pub const HMAC_SECRET_BYTES: usize = 32;

/// Why the webhook signing key could not be used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is readable by group or others (mode {mode:o}); run `chmod 600 {path}`")]
    Permissions { path: PathBuf, mode: u32 },
    #[error("{0}: not a webhook signing key (expected whsk_ and the base64 of 32 bytes)")]
    Format(PathBuf),
}

/// How a delivery is signed.
pub enum Signing<'a> {
    /// `v1a` with the service's Ed25519 key.
    Ed25519(&'a SigningKey),
    /// `v1` with the endpoint's `whsec_` secret.
    Hmac(&'a str),
}

/// The `webhook-signature` header value for `id`, `timestamp` (unix seconds) and `body`.
pub fn signature(signing: &Signing<'_>, id: &str, timestamp: i64, body: &[u8]) -> String {
    let mut content = format!("{id}.{timestamp}.").into_bytes();
    content.extend_from_slice(body);
    match signing {
        Signing::Ed25519(key) => format!("v1a,{}", B64.encode(key.sign(&content).to_bytes())),
        Signing::Hmac(secret) => {
            let key = hmac_key(secret).unwrap_or_default();
            let mut mac =
                Hmac::<Sha256>::new_from_slice(&key).expect("HMAC takes a key of any length");
            mac.update(&content);
            format!("v1,{}", B64.encode(mac.finalize().into_bytes()))
        }
    }
}

/// The key bytes of a `whsec_` secret, if it is one.
pub fn hmac_key(secret: &str) -> Option<Vec<u8>> {
    B64.decode(secret.strip_prefix(HMAC_SECRET_PREFIX)?).ok()
}

/// A new `whsec_` secret from the operating system's random source.
pub fn new_hmac_secret() -> String {
    let mut bytes = [0u8; HMAC_SECRET_BYTES];
    rand_core::OsRng.fill_bytes(&mut bytes);
    format!("{HMAC_SECRET_PREFIX}{}", B64.encode(bytes))
}

/// The `whpk_` text of the key's public half.
pub fn public_key_text(key: &SigningKey) -> String {
    format!(
        "{PUBLIC_KEY_PREFIX}{}",
        B64.encode(key.verifying_key().as_bytes())
    )
}

/// Reads the webhook signing key at `path`, or creates it (mode 0600, never overwriting; the
/// public key next to it as `<path>.pub`) when absent. Returns the key and whether it was
/// created. A key file group or others may read is refused.
pub fn read_or_create_key(path: &Path) -> Result<(SigningKey, bool), KeyError> {
    let io = |source| KeyError::Io {
        path: path.to_owned(),
        source,
    };
    if !path.exists() {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(io)?;
        }
        let key = SigningKey::generate(&mut rand_core::OsRng);
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)
        {
            Ok(mut f) => {
                f.write_all(
                    format!(
                        "{SECRET_KEY_PREFIX}{}\n",
                        B64.encode(key.to_bytes().as_slice())
                    )
                    .as_bytes(),
                )
                .map_err(io)?;
                f.sync_all().map_err(io)?;
                let mut public = path.as_os_str().to_owned();
                public.push(".pub");
                std::fs::write(&public, format!("{}\n", public_key_text(&key))).map_err(io)?;
                return Ok((key, true));
            }
            // Another process created it meanwhile: read theirs.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io(e)),
        }
    }
    let mode = std::fs::metadata(path).map_err(io)?.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(KeyError::Permissions {
            path: path.to_owned(),
            mode,
        });
    }
    let text = std::fs::read_to_string(path).map_err(io)?;
    let seed: [u8; 32] = text
        .trim()
        .strip_prefix(SECRET_KEY_PREFIX)
        .and_then(|b| B64.decode(b).ok())
        .and_then(|b| b.try_into().ok())
        .ok_or_else(|| KeyError::Format(path.to_owned()))?;
    Ok((SigningKey::from_bytes(&seed), false))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::Verifier;

    #[test]
    fn v1a_signs_id_timestamp_and_body() {
        let key = SigningKey::from_bytes(&[7u8; 32]);
        let sig = signature(&Signing::Ed25519(&key), "msg_1", 1_700_000_000, b"{}");
        let b = B64.decode(sig.strip_prefix("v1a,").unwrap()).unwrap();
        let s = ed25519_dalek::Signature::from_slice(&b).unwrap();
        key.verifying_key()
            .verify(b"msg_1.1700000000.{}", &s)
            .unwrap();
        assert!(key
            .verifying_key()
            .verify(b"msg_1.1700000001.{}", &s)
            .is_err());
    }

    /// The example of the Standard Webhooks reference libraries' test suites.
    #[test]
    fn v1_matches_the_reference_vector() {
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let body = br#"{"test": 2432232314}"#;
        let sig = signature(
            &Signing::Hmac(secret),
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1614265330,
            body,
        );
        assert_eq!(sig, "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=");
    }

    #[test]
    fn generated_secrets_and_key_files() {
        let s = new_hmac_secret();
        assert_eq!(hmac_key(&s).unwrap().len(), HMAC_SECRET_BYTES);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("wh.key");
        let (k, created) = read_or_create_key(&p).unwrap();
        assert!(created);
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let (k2, created) = read_or_create_key(&p).unwrap();
        assert!(!created);
        assert_eq!(k.to_bytes(), k2.to_bytes());
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert!(matches!(
            read_or_create_key(&p),
            Err(KeyError::Permissions { .. })
        ));
    }
}
