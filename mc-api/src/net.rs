//! IPv4 prefixes, shared by the controllers (is an endpoint this cluster's own?) and the agent
//! (remote prefixes and routes).

use std::{fmt, net::Ipv4Addr};

/// An IPv4 prefix, normalised (host bits cleared).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Prefix {
    pub addr: Ipv4Addr,
    pub len: u8,
}

impl Prefix {
    pub fn parse(text: &str) -> Result<Self, String> {
        let (addr, len) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not a CIDR (expected a.b.c.d/n)"))?;
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| format!("{text:?}: {addr:?} is not an IPv4 address"))?;
        let len: u8 = len
            .parse()
            .ok()
            .filter(|l| *l <= 32)
            .ok_or_else(|| format!("{text:?}: prefix length must be 0..=32"))?;
        Ok(Self::new(addr, len))
    }

    pub fn new(addr: Ipv4Addr, len: u8) -> Self {
        let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        Self {
            addr: Ipv4Addr::from(u32::from(addr) & mask),
            len,
        }
    }

    /// Whether `ip` (text) is an IPv4 address inside this prefix.
    pub fn contains_ip(&self, ip: &str) -> bool {
        ip.parse::<Ipv4Addr>()
            .is_ok_and(|a| self.contains(&Prefix::new(a, 32)))
    }

    pub fn contains(&self, other: &Prefix) -> bool {
        other.len >= self.len && Prefix::new(other.addr, self.len).addr == self.addr
    }

    pub fn overlaps(&self, other: &Prefix) -> bool {
        self.contains(other) || other.contains(self)
    }
}

/// Ranges that are no cluster's Pods or Services: no member may announce them, and no Node
/// routes them toward a gateway (a route there would capture a Node's own traffic).
pub const SPECIAL: [(&str, &str); 5] = [
    ("0.0.0.0/8", "this network"),
    ("127.0.0.0/8", "loopback"),
    (
        "169.254.0.0/16",
        "link-local (cloud metadata services live there)",
    ),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved, and broadcast"),
];

impl Prefix {
    /// Why this prefix touches a [`SPECIAL`] range, if it does.
    pub fn special(&self) -> Option<String> {
        SPECIAL.iter().find_map(|(range, what)| {
            let range = Prefix::parse(range).expect("a valid special range");
            range
                .overlaps(self)
                .then(|| format!("{self} overlaps {range} ({what})"))
        })
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}
