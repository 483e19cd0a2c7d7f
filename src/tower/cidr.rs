//! A range of IP addresses written `addr/len`, for trusted proxies.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// A range of IP addresses, `10.0.0.0/8` or `2001:db8::/32`; a bare address
/// is a range of one. Used to say which proxies [`ClientIp`](super::ClientIp)
/// trusts.
///
/// ```
/// use shuffle_limiter::tower::Cidr;
///
/// let private: Cidr = "10.0.0.0/8".parse()?;
/// assert!(private.contains("10.1.2.3".parse()?));
/// assert!(!private.contains("11.0.0.1".parse()?));
/// let one: Cidr = "::1".parse()?;
/// assert_eq!(one.to_string(), "::1/128");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    addr: IpAddr,
    len: u8,
}

/// A range or prefix length that does not fit its address family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidCidr {
    text: String,
    reason: &'static str,
}

impl fmt::Display for InvalidCidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:?} is not an IP range: {}; write an address, optionally with a prefix \
             length, for example \"10.0.0.0/8\", \"192.0.2.1\" or \"2001:db8::/32\"",
            self.text, self.reason
        )
    }
}

impl std::error::Error for InvalidCidr {}

/// The largest prefix length of `addr`'s family.
pub(super) fn max_len(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

/// `addr` with every bit after the first `len` cleared.
pub(super) fn mask(addr: IpAddr, len: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let kept = bits.checked_shr(32 - u32::from(len.min(32))).unwrap_or(0);
            IpAddr::from(Ipv4Addr::from(
                kept.checked_shl(32 - u32::from(len.min(32))).unwrap_or(0),
            ))
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let shift = 128 - u32::from(len.min(128));
            let kept = bits.checked_shr(shift).unwrap_or(0);
            IpAddr::from(Ipv6Addr::from(kept.checked_shl(shift).unwrap_or(0)))
        }
    }
}

impl Cidr {
    /// The range of the addresses sharing `addr`'s first `len` bits.
    ///
    /// # Errors
    /// [`InvalidCidr`] if `len` is longer than the address (32 bits for
    /// IPv4, 128 for IPv6).
    ///
    /// ```
    /// use std::net::Ipv4Addr;
    /// use shuffle_limiter::tower::Cidr;
    ///
    /// let net = Cidr::new(Ipv4Addr::new(192, 168, 7, 9).into(), 16)?;
    /// assert_eq!(net.to_string(), "192.168.0.0/16");
    /// assert!(Cidr::new(Ipv4Addr::LOCALHOST.into(), 33).is_err());
    /// # Ok::<(), shuffle_limiter::tower::InvalidCidr>(())
    /// ```
    pub fn new(addr: IpAddr, len: u8) -> Result<Self, InvalidCidr> {
        if len > max_len(addr) {
            return Err(InvalidCidr {
                text: format!("{addr}/{len}"),
                reason: "the prefix length is longer than the address",
            });
        }
        let canonical = addr.to_canonical();
        // An IPv4-mapped range, ::ffff:a.b.c.d/len, is the IPv4 range it maps.
        let (addr, len) = if addr.is_ipv6() && canonical.is_ipv4() && len >= 96 {
            (canonical, len - 96)
        } else {
            (addr, len)
        };
        Ok(Cidr {
            addr: mask(addr, len),
            len,
        })
    }

    /// Whether `addr` is in the range (IPv4-mapped IPv6 addresses count as
    /// IPv4).
    pub fn contains(&self, addr: IpAddr) -> bool {
        let addr = addr.to_canonical();
        addr.is_ipv4() == self.addr.is_ipv4() && mask(addr, self.len) == self.addr
    }
}

impl From<IpAddr> for Cidr {
    fn from(addr: IpAddr) -> Self {
        let addr = addr.to_canonical();
        Cidr {
            addr,
            len: max_len(addr),
        }
    }
}

impl FromStr for Cidr {
    type Err = InvalidCidr;

    fn from_str(text: &str) -> Result<Self, InvalidCidr> {
        let invalid = |reason| InvalidCidr {
            text: text.to_owned(),
            reason,
        };
        let (addr, len) = match text.split_once('/') {
            Some((addr, len)) => (addr, Some(len)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .trim()
            .parse()
            .map_err(|_| invalid("the address does not parse"))?;
        match len {
            None => Ok(Cidr::from(addr)),
            Some(len) => {
                let len = len
                    .trim()
                    .parse()
                    .map_err(|_| invalid("the prefix length is not a number"))?;
                Cidr::new(addr, len).map_err(|_| invalid("the prefix length is too long"))
            }
        }
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(text: &str) -> Cidr {
        text.parse().unwrap()
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn ranges_contain_their_addresses_only() {
        assert!(cidr("0.0.0.0/0").contains(ip("255.1.2.3")));
        assert!(!cidr("0.0.0.0/0").contains(ip("::1")), "families apart");
        assert!(cidr("::/0").contains(ip("2001:db8::1")));
        assert!(cidr("2001:db8::/32").contains(ip("2001:db8:ffff::1")));
        assert!(!cidr("2001:db8::/32").contains(ip("2001:db9::1")));
        assert!(cidr("192.0.2.1").contains(ip("192.0.2.1")));
        assert!(!cidr("192.0.2.1").contains(ip("192.0.2.2")));
        // IPv4-mapped addresses and ranges count as IPv4.
        assert!(cidr("10.0.0.0/8").contains(ip("::ffff:10.9.8.7")));
        assert_eq!(cidr("::ffff:10.0.0.0/104"), cidr("10.0.0.0/8"));
        // A shorter range over mapped space stays IPv6 (and is masked).
        assert_eq!(cidr("::ffff:0:0/90").to_string(), "::ffc0:0:0/90");
    }

    #[test]
    fn bad_ranges_are_errors_that_show_the_syntax() {
        for bad in [
            "",
            "10.0.0/8",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/-1",
            "x/8",
        ] {
            let err = bad.parse::<Cidr>().unwrap_err().to_string();
            assert!(err.contains("for example \"10.0.0.0/8\""), "{bad}: {err}");
        }
    }

    #[test]
    fn masks_keep_the_prefix() {
        assert_eq!(mask(ip("203.0.113.77"), 24), ip("203.0.113.0"));
        assert_eq!(mask(ip("203.0.113.77"), 0), ip("0.0.0.0"));
        assert_eq!(mask(ip("203.0.113.77"), 32), ip("203.0.113.77"));
        assert_eq!(mask(ip("2001:db8:1:2:3::4"), 64), ip("2001:db8:1:2::"));
        assert_eq!(mask(ip("2001:db8::1"), 0), ip("::"));
        assert_eq!(mask(ip("2001:db8::1"), 128), ip("2001:db8::1"));
    }
}
