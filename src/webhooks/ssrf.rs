//! Which webhook targets may be called (server-side request forgery).
//!
//! An endpoint URL must be `http` or `https`, name a host, carry no user name or password and
//! no fragment. Unless `[webhooks] allow_private_targets` (unsafe) is set, every address its
//! host resolves to must be a public unicast address: [`forbidden`] names the ranges refused.
//! The rule is applied at registration (422 with the reason) and again at each delivery on the
//! addresses actually connected to: [`PinnedResolver`] resolves the host once, drops forbidden
//! addresses and hands ureq only the checked ones, so a DNS answer that changes between the
//! check and the connection (rebinding) cannot reach a private address. Redirects are never
//! followed.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, ToSocketAddrs};
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

/// Longest endpoint URL accepted, in bytes.
pub const MAX_URL_BYTES: usize = 2_048;

/// Why an address may not be a webhook target, or `None` when it may.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => {
            // IPv4-mapped (::ffff:a.b.c.d), IPv4-compatible and NAT64 (64:ff9b::/96)
            // addresses reach the embedded IPv4 address: judge that one.
            if let Some(v4) = v6.to_ipv4_mapped() {
                return forbidden_v4(v4);
            }
            let s = v6.segments();
            if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
                let o = v6.octets();
                return forbidden_v4(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
            }
            if v6.is_unspecified() {
                Some("unspecified address")
            } else if v6.is_loopback() {
                Some("loopback address")
            } else if v6.is_multicast() {
                Some("multicast address")
            } else if s[0] == 0xfd00 && s[1] == 0x0ec2 {
                Some("cloud metadata address (fd00:ec2::/32)")
            } else if s[0] & 0xfe00 == 0xfc00 {
                Some("private address (unique local, fc00::/7)")
            } else if s[0] & 0xffc0 == 0xfe80 {
                Some("link-local address (fe80::/10)")
            } else if s[0] & 0xffc0 == 0xfec0 {
                Some("site-local address (fec0::/10)")
            } else if s[0..6] == [0, 0, 0, 0, 0, 0] {
                Some("IPv4-compatible address (::/96)")
            } else if s[0] == 0x2001 && s[1] == 0x0db8 {
                Some("documentation address (2001:db8::/32)")
            } else {
                None
            }
        }
    }
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let o = ip.octets();
    if ip.is_unspecified() || o[0] == 0 {
        Some("unspecified address (0.0.0.0/8)")
    } else if ip.is_loopback() {
        Some("loopback address (127.0.0.0/8)")
    } else if ip == Ipv4Addr::new(169, 254, 169, 254) || ip == Ipv4Addr::new(100, 100, 100, 200) {
        Some("cloud metadata address")
    } else if ip.is_private() {
        Some("private address (RFC 1918)")
    } else if ip.is_link_local() {
        Some("link-local address (169.254.0.0/16)")
    } else if o[0] == 100 && (o[1] & 0xc0) == 64 {
        Some("shared address space (CGNAT, 100.64.0.0/10)")
    } else if ip.is_multicast() {
        Some("multicast address")
    } else if ip.is_broadcast() || o[0] >= 240 {
        Some("reserved address (240.0.0.0/4)")
    } else if o[0] == 198 && (o[1] & 0xfe) == 18 {
        Some("benchmarking address (198.18.0.0/15)")
    } else if o[0] == 192 && o[1] == 0 && o[2] == 0 {
        Some("IETF protocol assignment (192.0.0.0/24)")
    } else if ip.is_documentation() {
        Some("documentation address")
    } else {
        None
    }
}

/// A checked endpoint URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// The URL as it will be called (normalised by the `url` crate).
    pub url: String,
    /// Its host (without brackets for IPv6).
    pub host: String,
    /// Its port (the scheme's default when absent).
    pub port: u16,
}

/// Checks an endpoint URL's form (not its addresses): `http`/`https`, a host, no credentials,
/// no fragment, at most [`MAX_URL_BYTES`].
pub fn parse_url(text: &str) -> Result<Target, String> {
    if text.len() > MAX_URL_BYTES {
        return Err(format!("is longer than {MAX_URL_BYTES} bytes"));
    }
    let url = url::Url::parse(text).map_err(|e| format!("is not a URL: {e}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("must be http or https, not {:?}", url.scheme()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("must not carry a user name or password".into());
    }
    if url.fragment().is_some() {
        return Err("must not have a fragment".into());
    }
    let host = match url.host() {
        Some(url::Host::Domain(d)) => d.to_owned(),
        Some(url::Host::Ipv4(a)) => a.to_string(),
        Some(url::Host::Ipv6(a)) => a.to_string(),
        None => return Err("must name a host".into()),
    };
    let port = url
        .port_or_known_default()
        .ok_or_else(|| "has no port".to_owned())?;
    Ok(Target {
        url: url.to_string(),
        host,
        port,
    })
}

/// Resolves `host:port` and keeps the addresses that may be called; an error names why none
/// may (the first forbidden address and its range, or a failed lookup).
pub fn allowed_addresses(
    host: &str,
    port: u16,
    allow_private: bool,
) -> Result<Vec<SocketAddr>, String> {
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => (host, port)
            .to_socket_addrs()
            .map_err(|e| format!("host {host} does not resolve: {e}"))?
            .collect(),
    };
    if addrs.is_empty() {
        return Err(format!("host {host} resolves to no address"));
    }
    if allow_private {
        return Ok(addrs);
    }
    let mut refused = None;
    let allowed: Vec<SocketAddr> = addrs
        .into_iter()
        .filter(|a| match forbidden(a.ip()) {
            Some(why) => {
                refused.get_or_insert((a.ip(), why));
                false
            }
            None => true,
        })
        .collect();
    match (allowed.is_empty(), refused) {
        // At registration, one forbidden address among several is refused too: see
        // [`check_registration`].
        (false, _) => Ok(allowed),
        (true, Some((ip, why))) => Err(format!("host {host} resolves to {ip}, a {why}")),
        (true, None) => Err(format!("host {host} resolves to no address")),
    }
}

/// The registration check: the URL's form, then every address its host resolves to (any
/// forbidden one refuses the URL). The error is the reason, for a 422.
pub fn check_registration(text: &str, allow_private: bool) -> Result<Target, String> {
    let target = parse_url(text)?;
    let addrs = allowed_addresses(&target.host, target.port, true)?;
    if !allow_private {
        for a in addrs {
            if let Some(why) = forbidden(a.ip()) {
                return Err(format!(
                    "host {} resolves to {}, a {why}; such targets are refused unless [webhooks] allow_private_targets is set",
                    target.host,
                    a.ip()
                ));
            }
        }
    }
    Ok(target)
}

/// A ureq resolver that answers with addresses checked beforehand: the connection goes to an
/// address that passed [`forbidden`], whatever the DNS says later.
#[derive(Debug)]
pub struct PinnedResolver {
    /// The checked addresses (at least one).
    pub addrs: Vec<SocketAddr>,
}

impl Resolver for PinnedResolver {
    fn resolve(
        &self,
        _uri: &ureq::http::Uri,
        _config: &ureq::config::Config,
        _timeout: NextTimeout,
    ) -> Result<ResolvedSocketAddrs, ureq::Error> {
        let mut out = self.empty();
        for a in self.addrs.iter().take(16) {
            out.push(*a);
        }
        if out.is_empty() {
            return Err(ureq::Error::HostNotFound);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_and_special_ranges_are_forbidden() {
        for bad in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "169.254.1.1",
            "100.64.0.1",
            "100.100.100.200",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "::1",
            "::",
            "fc00::1",
            "fd00:ec2::254",
            "fe80::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "64:ff9b::a00:1",
        ] {
            assert!(forbidden(bad.parse().unwrap()).is_some(), "{bad}");
        }
        for good in ["8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "100.128.0.1"] {
            assert_eq!(forbidden(good.parse().unwrap()), None, "{good}");
        }
    }

    #[test]
    fn urls_are_checked_for_form_and_address() {
        assert!(parse_url("ftp://example.com/")
            .unwrap_err()
            .contains("http"));
        assert!(parse_url("https://u:p@example.com/")
            .unwrap_err()
            .contains("password"));
        assert!(parse_url("https://example.com/#x")
            .unwrap_err()
            .contains("fragment"));
        assert!(parse_url("not a url").is_err());
        let t = parse_url("https://[::1]:8443/hook").unwrap();
        assert_eq!((t.host.as_str(), t.port), ("::1", 8443));
        let e = check_registration("http://127.0.0.1:9/x", false).unwrap_err();
        assert!(e.contains("loopback"), "{e}");
        let e = check_registration("http://169.254.169.254/latest", false).unwrap_err();
        assert!(e.contains("metadata"), "{e}");
        assert!(check_registration("http://127.0.0.1:9/x", true).is_ok());
        let e = check_registration("http://localhost:9/x", false).unwrap_err();
        assert!(e.contains("loopback"), "{e}");
    }
}
