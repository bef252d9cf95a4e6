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

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}
