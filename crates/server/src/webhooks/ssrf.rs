//! Which webhook targets may be called (server-side request forgery).
//!
//! An endpoint URL must be `http` or `https`, name a host, carry no user name or password and
//! no fragment. Unless `[webhooks] allow_private_targets` (unsafe) is set, every address its
//! host resolves to must be globally reachable by the IANA special-purpose address registries
//! ([`IPV4_SPECIAL`], [`IPV6_SPECIAL`]), and an IPv6 address that carries an IPv4 address
//! (mapped, translated, NAT64, 6to4, Teredo) must carry a permitted one: [`forbidden`] says why
//! an address is refused.
//! The rule is applied at registration (422 with the reason) and again at each delivery on the
//! addresses actually connected to: [`PinnedResolver`] resolves the host once, drops forbidden
//! addresses and hands ureq only the checked ones, so a DNS answer that changes between the
//! check and the connection (rebinding) cannot reach a private address. Redirects are never
//! followed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use ureq::unversioned::resolver::{ResolvedSocketAddrs, Resolver};
use ureq::unversioned::transport::NextTimeout;

/// Longest endpoint URL accepted, in bytes.
pub const MAX_URL_BYTES: usize = 2_048;

/// Whether the registry says a datagram to the block is forwardable beyond an
/// administrative domain ("Globally Reachable"): `True`, `False`, or `N/A` (deprecated blocks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reach {
    True,
    False,
    NotApplicable,
}

/// One entry of a special-purpose address registry: its block, its name as the registry
/// gives it, and its "Globally Reachable" value.
#[derive(Debug, Clone, Copy)]
pub struct Special<A> {
    pub addr: A,
    pub len: u8,
    pub name: &'static str,
    /// What it is, in plain words, for messages (`loopback`, `private`…).
    pub kind: &'static str,
    pub global: Reach,
}

const fn v4(
    a: [u8; 4],
    len: u8,
    name: &'static str,
    kind: &'static str,
    global: Reach,
) -> Special<Ipv4Addr> {
    Special {
        addr: Ipv4Addr::new(a[0], a[1], a[2], a[3]),
        len,
        name,
        kind,
        global,
    }
}

const fn v6(
    s: [u16; 8],
    len: u8,
    name: &'static str,
    kind: &'static str,
    global: Reach,
) -> Special<Ipv6Addr> {
    Special {
        addr: Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]),
        len,
        name,
        kind,
        global,
    }
}

use Reach::{False as NO, NotApplicable as NA, True as YES};

/// The IANA IPv4 Special-Purpose Address Registry (RFC 6890, RFC 8190),
/// <https://www.iana.org/assignments/iana-ipv4-special-registry/>, every entry with its
/// "Globally Reachable" value. Transcribed 2026-12-01 from the registry as last changed by
/// RFC 8155 and RFC 7526 (the 2015 deprecation of 6to4 relay anycast, 192.88.99.0/24), the
/// latest entries the transcription knows; this machine cannot reach iana.org, so compare
/// with the live registry when it is next updated. A more specific entry overrides the block
/// it lies in (192.0.0.9/32 inside 192.0.0.0/24).
pub static IPV4_SPECIAL: &[Special<Ipv4Addr>] = &[
    v4([0, 0, 0, 0], 8, "\"This network\"", "unspecified", NO),
    v4(
        [0, 0, 0, 0],
        32,
        "\"This host on this network\"",
        "unspecified",
        NO,
    ),
    v4([10, 0, 0, 0], 8, "Private-Use", "private", NO),
    v4(
        [100, 64, 0, 0],
        10,
        "Shared Address Space",
        "shared (CGNAT)",
        NO,
    ),
    v4([127, 0, 0, 0], 8, "Loopback", "loopback", NO),
    v4([169, 254, 0, 0], 16, "Link Local", "link-local", NO),
    v4([172, 16, 0, 0], 12, "Private-Use", "private", NO),
    v4(
        [192, 0, 0, 0],
        24,
        "IETF Protocol Assignments",
        "protocol-assignment",
        NO,
    ),
    v4(
        [192, 0, 0, 0],
        29,
        "IPv4 Service Continuity Prefix",
        "protocol-assignment",
        NO,
    ),
    v4([192, 0, 0, 8], 32, "IPv4 dummy address", "dummy", NO),
    v4(
        [192, 0, 0, 9],
        32,
        "Port Control Protocol Anycast",
        "anycast",
        YES,
    ),
    v4(
        [192, 0, 0, 10],
        32,
        "Traversal Using Relays around NAT Anycast",
        "anycast",
        YES,
    ),
    v4(
        [192, 0, 0, 170],
        32,
        "NAT64/DNS64 Discovery",
        "protocol-assignment",
        NO,
    ),
    v4(
        [192, 0, 0, 171],
        32,
        "NAT64/DNS64 Discovery",
        "protocol-assignment",
        NO,
    ),
    v4(
        [192, 0, 2, 0],
        24,
        "Documentation (TEST-NET-1)",
        "documentation",
        NO,
    ),
    v4([192, 31, 196, 0], 24, "AS112-v4", "anycast", YES),
    v4([192, 52, 193, 0], 24, "AMT", "anycast", YES),
    v4(
        [192, 88, 99, 0],
        24,
        "Deprecated (6to4 Relay Anycast)",
        "deprecated 6to4 relay",
        NA,
    ),
    v4([192, 168, 0, 0], 16, "Private-Use", "private", NO),
    v4(
        [192, 175, 48, 0],
        24,
        "Direct Delegation AS112 Service",
        "anycast",
        YES,
    ),
    v4([198, 18, 0, 0], 15, "Benchmarking", "benchmarking", NO),
    v4(
        [198, 51, 100, 0],
        24,
        "Documentation (TEST-NET-2)",
        "documentation",
        NO,
    ),
    v4(
        [203, 0, 113, 0],
        24,
        "Documentation (TEST-NET-3)",
        "documentation",
        NO,
    ),
    v4([240, 0, 0, 0], 4, "Reserved", "reserved", NO),
    v4(
        [255, 255, 255, 255],
        32,
        "Limited Broadcast",
        "broadcast",
        NO,
    ),
];

/// The IANA IPv6 Special-Purpose Address Registry (RFC 6890, RFC 8190),
/// <https://www.iana.org/assignments/iana-ipv6-special-registry/>, every entry with its
/// "Globally Reachable" value. Transcribed 2026-12-01 from the registry as last changed by
/// RFC 9780 (2025, the dummy IPv6 prefix), RFC 9665, RFC 9637 and RFC 9602, the latest entries
/// the transcription knows; compare with the live registry when it is next updated. A more
/// specific entry overrides the block it lies in (2001:3::/32 inside 2001::/23).
pub static IPV6_SPECIAL: &[Special<Ipv6Addr>] = &[
    v6(
        [0, 0, 0, 0, 0, 0, 0, 1],
        128,
        "Loopback Address",
        "loopback",
        NO,
    ),
    v6(
        [0, 0, 0, 0, 0, 0, 0, 0],
        128,
        "Unspecified Address",
        "unspecified",
        NO,
    ),
    v6(
        [0, 0, 0, 0, 0, 0xffff, 0, 0],
        96,
        "IPv4-mapped Address",
        "IPv4-mapped",
        NO,
    ),
    v6(
        [0x64, 0xff9b, 0, 0, 0, 0, 0, 0],
        96,
        "IPv4-IPv6 Translat.",
        "translation",
        YES,
    ),
    v6(
        [0x64, 0xff9b, 1, 0, 0, 0, 0, 0],
        48,
        "IPv4-IPv6 Translat.",
        "translation",
        NO,
    ),
    v6(
        [0x100, 0, 0, 0, 0, 0, 0, 0],
        64,
        "Discard-Only Address Block",
        "discard-only",
        NO,
    ),
    v6(
        [0x100, 0, 0, 1, 0, 0, 0, 0],
        64,
        "Dummy IPv6 Prefix",
        "dummy",
        NO,
    ),
    v6(
        [0x2001, 0, 0, 0, 0, 0, 0, 0],
        23,
        "IETF Protocol Assignments",
        "protocol-assignment",
        NO,
    ),
    v6(
        [0x2001, 0, 0, 0, 0, 0, 0, 0],
        32,
        "TEREDO",
        "Teredo tunnel",
        NA,
    ),
    v6(
        [0x2001, 1, 0, 0, 0, 0, 0, 1],
        128,
        "Port Control Protocol Anycast",
        "anycast",
        YES,
    ),
    v6(
        [0x2001, 1, 0, 0, 0, 0, 0, 2],
        128,
        "Traversal Using Relays around NAT Anycast",
        "anycast",
        YES,
    ),
    v6(
        [0x2001, 1, 0, 0, 0, 0, 0, 3],
        128,
        "DNS-SD Service Registration Protocol Anycast",
        "anycast",
        YES,
    ),
    v6(
        [0x2001, 2, 0, 0, 0, 0, 0, 0],
        48,
        "Benchmarking",
        "benchmarking",
        NO,
    ),
    v6([0x2001, 3, 0, 0, 0, 0, 0, 0], 32, "AMT", "anycast", YES),
    v6(
        [0x2001, 4, 0x112, 0, 0, 0, 0, 0],
        48,
        "AS112-v6",
        "anycast",
        YES,
    ),
    v6(
        [0x2001, 0x10, 0, 0, 0, 0, 0, 0],
        28,
        "Deprecated (previously ORCHID)",
        "deprecated ORCHID",
        NA,
    ),
    v6(
        [0x2001, 0x20, 0, 0, 0, 0, 0, 0],
        28,
        "ORCHIDv2",
        "identifier",
        YES,
    ),
    v6(
        [0x2001, 0x30, 0, 0, 0, 0, 0, 0],
        28,
        "Drone Remote ID Protocol Entity Tags (DETs) Prefix",
        "identifier",
        YES,
    ),
    v6(
        [0x2001, 0xdb8, 0, 0, 0, 0, 0, 0],
        32,
        "Documentation",
        "documentation",
        NO,
    ),
    v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16, "6to4", "6to4 tunnel", NA),
    v6(
        [0x2620, 0x4f, 0x8000, 0, 0, 0, 0, 0],
        48,
        "Direct Delegation AS112 Service",
        "anycast",
        YES,
    ),
    v6(
        [0x3fff, 0, 0, 0, 0, 0, 0, 0],
        20,
        "Documentation",
        "documentation",
        NO,
    ),
    v6(
        [0x5f00, 0, 0, 0, 0, 0, 0, 0],
        16,
        "Segment Routing (SRv6) SIDs",
        "segment-routing",
        NO,
    ),
    v6(
        [0xfc00, 0, 0, 0, 0, 0, 0, 0],
        7,
        "Unique-Local",
        "private (unique local)",
        NO,
    ),
    v6(
        [0xfe80, 0, 0, 0, 0, 0, 0, 0],
        10,
        "Link-Local Unicast",
        "link-local",
        NO,
    ),
];

fn in_v4(ip: Ipv4Addr, net: Ipv4Addr, len: u8) -> bool {
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    u32::from(ip) & mask == u32::from(net) & mask
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, len: u8) -> bool {
    let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    u128::from(ip) & mask == u128::from(net) & mask
}

/// The most specific registry entry `ip` falls in, if any.
pub fn special_v4(ip: Ipv4Addr) -> Option<&'static Special<Ipv4Addr>> {
    IPV4_SPECIAL
        .iter()
        .filter(|e| in_v4(ip, e.addr, e.len))
        .max_by_key(|e| e.len)
}

/// The most specific registry entry `ip` falls in, if any.
pub fn special_v6(ip: Ipv6Addr) -> Option<&'static Special<Ipv6Addr>> {
    IPV6_SPECIAL
        .iter()
        .filter(|e| in_v6(ip, e.addr, e.len))
        .max_by_key(|e| e.len)
}

fn refusal<A: std::fmt::Display>(e: &Special<A>) -> String {
    let reach = match e.global {
        Reach::False => "False",
        Reach::NotApplicable => "N/A",
        Reach::True => "True",
    };
    format!(
        "{} address ({}, {}/{}; IANA special-purpose registry: Globally Reachable {reach})",
        e.kind, e.name, e.addr, e.len
    )
}

/// Addresses where clouds serve instance metadata and credentials (AWS, GCP and Azure on
/// 169.254.169.254 and fd00:ec2::254, Alibaba on 100.100.100.200): their ranges are refused
/// anyway; the message says what they are.
const METADATA: [IpAddr; 3] = [
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
];

/// Why an IPv4 address may not be a webhook target, or `None` when it may: a block of the
/// IPv4 registry that is not globally reachable, or multicast (224.0.0.0/4, the IPv4 Multicast
/// Address Space Registry), which no webhook is sent to.
pub fn forbidden_v4(ip: Ipv4Addr) -> Option<String> {
    metadata(IpAddr::V4(ip), forbidden_v4_range(ip))
}

/// A refusal of one of the [`METADATA`] addresses says so.
fn metadata(ip: IpAddr, why: Option<String>) -> Option<String> {
    match why {
        Some(why) if METADATA.contains(&ip) => Some(format!("cloud metadata address, a {why}")),
        why => why,
    }
}

fn forbidden_v4_range(ip: Ipv4Addr) -> Option<String> {
    if ip.is_multicast() {
        return Some("multicast address (224.0.0.0/4)".into());
    }
    match special_v4(ip) {
        Some(e) if e.global != Reach::True => Some(refusal(e)),
        _ => None,
    }
}

/// The IPv4 addresses an IPv6 address carries and reaches, with the form's name: IPv4-mapped
/// (`::ffff:0:0/96`), IPv4-translated (`::ffff:0:0:0/96`, RFC 2765), IPv4-compatible
/// (`::/96`, deprecated), NAT64 (`64:ff9b::/96`, RFC 6052), 6to4 (`2002::/16`, RFC 3056: bits
/// 16–47) and Teredo (`2001::/32`, RFC 4380: the server, bits 32–63, and the client, the last
/// 32 bits inverted).
pub fn embedded_v4(ip: Ipv6Addr) -> Vec<(&'static str, Ipv4Addr)> {
    let s = ip.segments();
    let o = ip.octets();
    let last = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    let mut out = Vec::new();
    if s[..5] == [0; 5] && s[5] == 0xffff {
        out.push(("IPv4-mapped address (::ffff:0:0/96)", last));
    } else if s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0 {
        out.push(("IPv4-translated address (::ffff:0:0:0/96)", last));
    } else if s[..6] == [0; 6] && u32::from(last) > 1 {
        out.push(("IPv4-compatible address (::/96)", last));
    } else if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        out.push(("NAT64 address (64:ff9b::/96)", last));
    } else if s[0] == 0x2002 {
        out.push((
            "6to4 address (2002::/16)",
            Ipv4Addr::new(o[2], o[3], o[4], o[5]),
        ));
    } else if s[0] == 0x2001 && s[1] == 0 {
        out.push((
            "Teredo address (2001::/32), server",
            Ipv4Addr::new(o[4], o[5], o[6], o[7]),
        ));
        out.push((
            "Teredo address (2001::/32), client",
            Ipv4Addr::from(!u32::from(last)),
        ));
    }
    out
}

/// Why an IPv6 address may not be a webhook target, or `None` when it may. First the IPv4
/// address it embeds, if any ([`embedded_v4`]), by the IPv4 rules; then the address itself: a
/// block of the IPv6 registry that is not globally reachable; multicast (`ff00::/8`);
/// site-local (`fec0::/10`, deprecated); IPv4-translated and IPv4-compatible addresses; and
/// anything outside the global unicast space `2000::/3` that no globally reachable registry
/// entry names (the rest is unassigned or reserved by the IETF).
pub fn forbidden_v6(ip: Ipv6Addr) -> Option<String> {
    metadata(IpAddr::V6(ip), forbidden_v6_range(ip))
}

fn forbidden_v6_range(ip: Ipv6Addr) -> Option<String> {
    for (form, inner) in embedded_v4(ip) {
        if let Some(why) = forbidden_v4(inner) {
            return Some(format!("{form} of {inner}, a {why}"));
        }
    }
    let s = ip.segments();
    if ip.is_multicast() {
        return Some("multicast address (ff00::/8)".into());
    }
    if s[0] & 0xffc0 == 0xfec0 {
        return Some("site-local address (fec0::/10, deprecated)".into());
    }
    match special_v6(ip) {
        Some(e) if e.global != Reach::True => return Some(refusal(e)),
        Some(_) => return None,
        None => {}
    }
    if s[..4] == [0; 4] && s[4] == 0xffff && s[5] == 0 {
        return Some("IPv4-translated address (::ffff:0:0:0/96)".into());
    }
    if s[..6] == [0; 6] {
        return Some("IPv4-compatible address (::/96, deprecated)".into());
    }
    if s[0] & 0xe000 != 0x2000 {
        return Some("address outside the global unicast space (2000::/3)".into());
    }
    None
}

/// Why an address may not be a webhook target, or `None` when it may: [`forbidden_v4`],
/// [`forbidden_v6`].
pub fn forbidden(ip: IpAddr) -> Option<String> {
    match ip {
        IpAddr::V4(a) => forbidden_v4(a),
        IpAddr::V6(a) => forbidden_v6(a),
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

    /// One probe address in every entry of both registries, with the verdict its "Globally
    /// Reachable" value implies (refused unless True); every entry must be probed.
    #[test]
    fn every_registry_entry_is_judged_by_its_global_reachability() {
        let v4_probes: &[(&str, bool)] = &[
            ("0.1.2.3", true),         // "This network"
            ("0.0.0.0", true),         // "This host on this network"
            ("10.255.0.1", true),      // Private-Use
            ("100.64.0.1", true),      // Shared Address Space
            ("100.127.255.254", true), // Shared Address Space, last
            ("127.0.0.1", true),       // Loopback
            ("169.254.1.1", true),     // Link Local
            ("172.31.255.255", true),  // Private-Use
            ("192.0.0.200", true),     // IETF Protocol Assignments
            ("192.0.0.1", true),       // IPv4 Service Continuity Prefix
            ("192.0.0.8", true),       // IPv4 dummy address
            ("192.0.0.9", false),      // Port Control Protocol Anycast
            ("192.0.0.10", false),     // Traversal Using Relays around NAT Anycast
            ("192.0.0.170", true),     // NAT64/DNS64 Discovery
            ("192.0.0.171", true),     // NAT64/DNS64 Discovery
            ("192.0.2.1", true),       // Documentation (TEST-NET-1)
            ("192.31.196.1", false),   // AS112-v4
            ("192.52.193.1", false),   // AMT
            ("192.88.99.1", true),     // Deprecated (6to4 Relay Anycast)
            ("192.168.1.1", true),     // Private-Use
            ("192.175.48.1", false),   // Direct Delegation AS112 Service
            ("198.19.255.255", true),  // Benchmarking
            ("198.51.100.7", true),    // Documentation (TEST-NET-2)
            ("203.0.113.7", true),     // Documentation (TEST-NET-3)
            ("240.0.0.1", true),       // Reserved
            ("255.255.255.255", true), // Limited Broadcast
        ];
        let v6_probes: &[(&str, bool)] = &[
            ("::1", true),                                  // Loopback Address
            ("::", true),                                   // Unspecified Address
            ("::ffff:8.8.8.8", true),                       // IPv4-mapped Address
            ("64:ff9b::8.8.8.8", false),                    // IPv4-IPv6 Translat. (/96)
            ("64:ff9b:1::8.8.8.8", true),                   // IPv4-IPv6 Translat. (/48)
            ("100::1", true),                               // Discard-Only Address Block
            ("100:0:0:1::1", true),                         // Dummy IPv6 Prefix
            ("2001:100::1", true),                          // IETF Protocol Assignments
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", true), // TEREDO
            ("2001:1::1", false),                           // Port Control Protocol Anycast
            ("2001:1::2", false), // Traversal Using Relays around NAT Anycast
            ("2001:1::3", false), // DNS-SD Service Registration Protocol Anycast
            ("2001:2::1", true),  // Benchmarking
            ("2001:3::1", false), // AMT
            ("2001:4:112::1", false), // AS112-v6
            ("2001:10::1", true), // Deprecated (previously ORCHID)
            ("2001:20::1", false), // ORCHIDv2
            ("2001:30::1", false), // Drone Remote ID Protocol Entity Tags
            ("2001:db8::1", true), // Documentation
            ("2002:808:808::1", true), // 6to4
            ("2620:4f:8000::1", false), // Direct Delegation AS112 Service
            ("3fff:fff::1", true), // Documentation (3fff::/20)
            ("5f00::1", true),    // Segment Routing (SRv6) SIDs
            ("fd12:3456::1", true), // Unique-Local
            ("fe80::1", true),    // Link-Local Unicast
        ];
        let mut hit4 = vec![false; IPV4_SPECIAL.len()];
        for (text, refused) in v4_probes {
            let ip: Ipv4Addr = text.parse().unwrap();
            let e = special_v4(ip).unwrap_or_else(|| panic!("{text} is in no entry"));
            let at = IPV4_SPECIAL
                .iter()
                .position(|x| std::ptr::eq(x, e))
                .unwrap();
            hit4[at] = true;
            assert_eq!(e.global != Reach::True, *refused, "{text} in {}", e.name);
            let got = forbidden(IpAddr::V4(ip));
            assert_eq!(got.is_some(), *refused, "{text}: {got:?}");
        }
        let mut hit6 = vec![false; IPV6_SPECIAL.len()];
        for (text, refused) in v6_probes {
            let ip: Ipv6Addr = text.parse().unwrap();
            let e = special_v6(ip).unwrap_or_else(|| panic!("{text} is in no entry"));
            let at = IPV6_SPECIAL
                .iter()
                .position(|x| std::ptr::eq(x, e))
                .unwrap();
            hit6[at] = true;
            let got = forbidden(IpAddr::V6(ip));
            assert_eq!(got.is_some(), *refused, "{text} in {}: {got:?}", e.name);
        }
        for (e, hit) in IPV4_SPECIAL.iter().zip(hit4) {
            assert!(hit, "no probe for {}/{} {}", e.addr, e.len, e.name);
        }
        for (e, hit) in IPV6_SPECIAL.iter().zip(hit6) {
            assert!(hit, "no probe for {}/{} {}", e.addr, e.len, e.name);
        }
    }

    #[test]
    fn embedded_ipv4_is_judged_too() {
        for (text, why) in [
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            ("::ffff:0:127.0.0.1", "loopback"), // IPv4-translated
            ("::ffff:0:8.8.8.8", "IPv4-translated"),
            ("::ffff:8.8.8.8", "IPv4-mapped"),
            ("::127.0.0.1", "loopback"), // IPv4-compatible
            ("::8.8.8.8", "IPv4-compatible"),
            ("64:ff9b::a00:1", "private"), // NAT64 of 10.0.0.1
            ("64:ff9b::7f00:1", "loopback"),
            ("64:ff9b::a9fe:a9fe", "metadata"),
            ("64:ff9b:1::808:808", "translation"),
            ("2002:7f00:1::1", "loopback"), // 6to4 of 127.0.0.1
            ("2002:a9fe:a9fe::1", "link-local"),
            ("2002:808:808::1", "6to4"),
            ("2001:0:7f00:1::1", "loopback"), // Teredo server 127.0.0.1
            ("2001:0:808:808::80ff:fffe", "loopback"), // Teredo client !0x80fffffe = 127.0.0.1
            ("2001:0:808:808::f7f7:f7f7", "Teredo"), // client 8.8.8.8
            ("fd00:ec2::254", "metadata"),
            ("169.254.169.254", "metadata"),
            ("100.100.100.200", "metadata"),
            ("ff02::1", "multicast"),
            ("ff0e::1", "multicast"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("fec0::1", "site-local"),
            ("4000::1", "global unicast"),
            ("::2:0:0:1", "global unicast"),
        ] {
            let why_not = forbidden(text.parse().unwrap());
            assert!(
                why_not.as_deref().is_some_and(|w| w.contains(why)),
                "{text}: {why_not:?}, wanted {why}"
            );
        }
        for good in [
            "8.8.8.8",
            "1.1.1.1",
            "100.128.0.1",
            "93.184.215.14",
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "2400:cb00::1",
            "64:ff9b::808:808",
        ] {
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
