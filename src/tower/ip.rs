//! The client's IP address: the peer of the connection, or the client that
//! trusted proxies name in the one header they write.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use http::request::Parts;
use http::{Extensions, HeaderName, HeaderValue};

use super::cidr::{Cidr, mask, max_len};

static FORWARDED: HeaderName = HeaderName::from_static("forwarded");
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");

type PeerFn = dyn Fn(&Extensions) -> Option<SocketAddr> + Send + Sync;

/// How to find a request's client IP address, for
/// [`TenantKey::client_ip`](super::TenantKey::client_ip).
///
/// The peer address comes from a value the server puts in the request
/// extensions: with axum, `ConnectInfo<SocketAddr>`, present only when the
/// app is served with `into_make_service_with_connect_info::<SocketAddr>()`.
/// This crate does not depend on axum, so you name that type and how to read
/// it. A request without it is answered `500 Internal Server Error` (see
/// [`NoPeerAddress`]): it is the server's setup, not the client, that is
/// wrong.
///
/// Proxy headers are believed only from [trusted](ClientIp::trust_proxies)
/// peers, and only the one header you name there: the [`ProxyHeader`] your
/// proxy writes. Every other proxy header is ignored, since a proxy passes
/// on the headers it does not write, so those are the client's to set. From
/// a trusted peer, the named header's list of hops is walked from the
/// right, skipping trusted proxies: the first untrusted address is the
/// client. A hop that does not parse (`unknown`, an obfuscated name) stops
/// the walk at the trusted proxy that reported it, so a client can never
/// choose its own key. A trusted peer that does not send the header is
/// itself the client.
///
/// Addresses are grouped before they become keys: IPv4 by `/32` (each
/// address alone) and IPv6 by `/64` (one key per customer network, which
/// usually holds many addresses), unless [`ipv4_prefix`](ClientIp::ipv4_prefix)
/// or [`ipv6_prefix`](ClientIp::ipv6_prefix) say otherwise.
///
/// ```
/// use std::net::SocketAddr;
/// use axum::extract::ConnectInfo;
/// use shuffle_limiter::tower::{ClientIp, ProxyHeader, TenantKey};
///
/// // Behind a load balancer at 10.0.0.0/8: the client it names.
/// let ip = ClientIp::peer(|c: &ConnectInfo<SocketAddr>| c.0)
///     .trust_proxies(ProxyHeader::XForwardedFor, ["10.0.0.0/8".parse()?, "::1".parse()?])
///     .ipv6_prefix(56)?;
/// let key = TenantKey::client_ip(ip);
/// // Serve with app.into_make_service_with_connect_info::<SocketAddr>().
/// # let _ = key;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Clone)]
pub struct ClientIp {
    peer: Arc<PeerFn>,
    peer_type: &'static str,
    trusted: Arc<[Cidr]>,
    header: ProxyHeader,
    ipv4_prefix: u8,
    ipv6_prefix: u8,
}

/// The one header a trusted proxy writes the client's address into, named
/// with [`ClientIp::trust_proxies`]: the one that proxy's configuration
/// sets (nginx: `proxy_set_header X-Real-IP $remote_addr` or `X-Forwarded-For
/// $proxy_add_x_forwarded_for`; most cloud load balancers: `X-Forwarded-For`;
/// Envoy: `X-Forwarded-For`; a CDN's own header with [`Other`](Self::Other)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ProxyHeader {
    /// `Forwarded` (RFC 7239): the `for=` node of each element.
    Forwarded,
    /// `X-Forwarded-For`: a comma-separated list of addresses.
    XForwardedFor,
    /// `X-Real-IP`: one address (a list is walked as `X-Forwarded-For`).
    XRealIp,
    /// Another header holding an address or a comma-separated list of them,
    /// such as `CF-Connecting-IP` or `Fly-Client-IP`.
    Other(HeaderName),
}

impl ProxyHeader {
    fn name(&self) -> &HeaderName {
        match self {
            ProxyHeader::Forwarded => &FORWARDED,
            ProxyHeader::XForwardedFor => &X_FORWARDED_FOR,
            ProxyHeader::XRealIp => &X_REAL_IP,
            ProxyHeader::Other(name) => name,
        }
    }

    fn parser(&self) -> fn(&str) -> Option<IpAddr> {
        match self {
            ProxyHeader::Forwarded => forwarded_for,
            _ => node,
        }
    }
}

/// The request carried no peer address: the server was not set up to put
/// one in the request extensions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoPeerAddress {
    peer_type: &'static str,
}

impl fmt::Display for NoPeerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the request has no `{}` in its extensions, so its peer address is unknown: \
             with axum, serve the app with \
             `app.into_make_service_with_connect_info::<SocketAddr>()`; with another \
             server, insert the peer address into each request's extensions",
            self.peer_type
        )
    }
}

impl std::error::Error for NoPeerAddress {}

/// A prefix length longer than its address family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidPrefix {
    family: &'static str,
    bits: u8,
    max: u8,
}

impl fmt::Display for InvalidPrefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "an {} prefix of {} bits is longer than the address: use 0 to {}",
            self.family, self.bits, self.max
        )
    }
}

impl std::error::Error for InvalidPrefix {}

/// # Setting up
impl ClientIp {
    /// The peer address is read from the request extensions' `T` by `addr`
    /// (with axum: `|c: &ConnectInfo<SocketAddr>| c.0`; with a server that
    /// inserts a plain `SocketAddr`: `|a: &SocketAddr| *a`). No proxy is
    /// trusted, so proxy headers are ignored.
    pub fn peer<T, F>(addr: F) -> Self
    where
        T: Send + Sync + 'static,
        F: Fn(&T) -> SocketAddr + Send + Sync + 'static,
    {
        ClientIp {
            peer: Arc::new(move |ext: &Extensions| ext.get::<T>().map(&addr)),
            peer_type: std::any::type_name::<T>(),
            trusted: Arc::new([]),
            header: ProxyHeader::XForwardedFor,
            ipv4_prefix: 32,
            ipv6_prefix: 64,
        }
    }

    /// Believes `header`, the one your proxies write, from peers in these
    /// ranges, and skips these addresses when walking its list of hops
    /// (replacing the header and ranges set before). Every other proxy
    /// header is ignored: the client could have set it.
    pub fn trust_proxies(
        mut self,
        header: ProxyHeader,
        proxies: impl IntoIterator<Item = Cidr>,
    ) -> Self {
        self.trusted = proxies.into_iter().collect();
        self.header = header;
        self
    }

    /// Groups IPv4 clients by their first `bits` bits (default 32: each
    /// address is its own key).
    ///
    /// # Errors
    /// [`InvalidPrefix`] if `bits` is over 32.
    pub fn ipv4_prefix(mut self, bits: u8) -> Result<Self, InvalidPrefix> {
        if bits > 32 {
            return Err(InvalidPrefix {
                family: "IPv4",
                bits,
                max: 32,
            });
        }
        self.ipv4_prefix = bits;
        Ok(self)
    }

    /// Groups IPv6 clients by their first `bits` bits (default 64: one key
    /// per /64 network, since one client usually holds a whole one).
    ///
    /// # Errors
    /// [`InvalidPrefix`] if `bits` is over 128.
    pub fn ipv6_prefix(mut self, bits: u8) -> Result<Self, InvalidPrefix> {
        if bits > 128 {
            return Err(InvalidPrefix {
                family: "IPv6",
                bits,
                max: 128,
            });
        }
        self.ipv6_prefix = bits;
        Ok(self)
    }
}

/// # Finding the client
impl ClientIp {
    /// The client's address (not yet grouped by prefix), as the key would
    /// see it; for allow-lists with [`TenantKey::exempt_if`](super::TenantKey::exempt_if).
    ///
    /// # Errors
    /// [`NoPeerAddress`] if the request extensions hold no peer address.
    ///
    /// ```
    /// use std::net::{IpAddr, SocketAddr};
    /// use axum::{extract::ConnectInfo, http::Request};
    /// use shuffle_limiter::tower::{ClientIp, ProxyHeader};
    ///
    /// let ip = ClientIp::peer(|c: &ConnectInfo<SocketAddr>| c.0)
    ///     .trust_proxies(ProxyHeader::XForwardedFor, ["10.0.0.0/8".parse()?]);
    /// let proxy: SocketAddr = "10.0.0.2:443".parse()?;
    /// let (mut parts, ()) = Request::get("/")
    ///     .header("x-forwarded-for", "198.51.100.1, 203.0.113.9, 10.0.0.1")
    ///     .body(())?
    ///     .into_parts();
    /// assert!(ip.resolve(&parts).is_err()); // no ConnectInfo yet
    /// parts.extensions.insert(ConnectInfo(proxy));
    /// // From the right: 10.0.0.1 is trusted, 203.0.113.9 is the client.
    /// assert_eq!(ip.resolve(&parts)?, "203.0.113.9".parse::<IpAddr>()?);
    /// // A header the proxy does not write is the client's: ignored.
    /// parts.headers.insert("forwarded", "for=192.0.2.1".parse()?);
    /// assert_eq!(ip.resolve(&parts)?, "203.0.113.9".parse::<IpAddr>()?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn resolve(&self, parts: &Parts) -> Result<IpAddr, NoPeerAddress> {
        let peer = (self.peer)(&parts.extensions).ok_or(NoPeerAddress {
            peer_type: self.peer_type,
        })?;
        let peer = peer.ip().to_canonical();
        if !self.trusts(peer) {
            return Ok(peer);
        }
        let lines = parts.headers.get_all(self.header.name()).iter();
        let mut client = peer;
        for hop in hops(lines, self.header.parser()) {
            match hop {
                // A hop we cannot read: the trusted proxy that wrote it is
                // the best we know.
                None => break,
                Some(addr) => {
                    client = addr;
                    if !self.trusts(addr) {
                        break;
                    }
                }
            }
        }
        Ok(client)
    }

    fn trusts(&self, addr: IpAddr) -> bool {
        self.trusted.iter().any(|range| range.contains(addr))
    }

    /// Runs `f` on the key bytes of `addr`: its address grouped by prefix.
    pub(super) fn with_key<R>(&self, addr: IpAddr, f: impl FnOnce(&[u8]) -> R) -> R {
        let addr = addr.to_canonical();
        let bits = if addr.is_ipv4() {
            self.ipv4_prefix
        } else {
            self.ipv6_prefix
        };
        match mask(addr, bits.min(max_len(addr))) {
            IpAddr::V4(v4) => f(&v4.octets()),
            IpAddr::V6(v6) => f(&v6.octets()),
        }
    }
}

impl fmt::Debug for ClientIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIp")
            .field("peer", &self.peer_type)
            .field("trusted", &self.trusted)
            .field("header", &self.header)
            .field("ipv4_prefix", &self.ipv4_prefix)
            .field("ipv6_prefix", &self.ipv6_prefix)
            .finish()
    }
}

/// The hops of all the lines of a header, from the right; a hop that is
/// not text does not parse. The line is split before it is read as text:
/// a proxy appends its hop to the client's own value, and a byte of the
/// client's that is not text must spoil the client's hop alone, not the
/// proxy's beside it (which would stop the walk at the proxy).
fn hops<'a>(
    lines: http::header::ValueIter<'a, HeaderValue>,
    parse: fn(&str) -> Option<IpAddr>,
) -> impl Iterator<Item = Option<IpAddr>> + 'a {
    lines.rev().flat_map(move |line| {
        let hops = line.as_bytes().rsplit(|&b| b == b',');
        hops.map(move |hop| std::str::from_utf8(hop).ok().and_then(parse))
    })
}

/// The `for=` node of one RFC 7239 element: `for=192.0.2.1`,
/// `for="[2001:db8::1]:4711"`; `unknown` and obfuscated names do not parse.
fn forwarded_for(element: &str) -> Option<IpAddr> {
    element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then(|| node(value.trim().trim_matches('"')))?
    })
}

/// An address with or without a port: `192.0.2.1`, `192.0.2.1:80`,
/// `2001:db8::1`, `[2001:db8::1]`, `[2001:db8::1]:443`.
fn node(text: &str) -> Option<IpAddr> {
    let text = text.trim();
    let addr = text.parse::<IpAddr>().ok().or_else(|| {
        let bracketed = text.strip_prefix('[')?.strip_suffix(']');
        match bracketed {
            Some(inner) => inner.parse().ok(),
            None => text.parse::<SocketAddr>().ok().map(|s| s.ip()),
        }
    });
    addr.or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
        .map(|addr| addr.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> Option<IpAddr> {
        text.parse().ok()
    }

    #[test]
    fn nodes_parse_with_and_without_ports_and_brackets() {
        assert_eq!(node(" 192.0.2.1 "), ip("192.0.2.1"));
        assert_eq!(node("192.0.2.1:80"), ip("192.0.2.1"));
        assert_eq!(node("2001:db8::1"), ip("2001:db8::1"));
        assert_eq!(node("[2001:db8::1]"), ip("2001:db8::1"));
        assert_eq!(node("[2001:db8::1]:443"), ip("2001:db8::1"));
        assert_eq!(node("::ffff:192.0.2.7"), ip("192.0.2.7"));
        assert_eq!(node("unknown"), None);
        assert_eq!(node(""), None);
    }

    #[test]
    fn forwarded_elements_give_their_for_node() {
        assert_eq!(forwarded_for("for=192.0.2.60;proto=http"), ip("192.0.2.60"));
        assert_eq!(
            forwarded_for(r#" proto=https; For="[2001:db8:cafe::17]:4711""#),
            ip("2001:db8:cafe::17")
        );
        assert_eq!(forwarded_for("for=_hidden"), None);
        assert_eq!(forwarded_for("by=203.0.113.43"), None);
    }
}
