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

/// The smallest list of prefixes that covers exactly the addresses `prefixes` cover: prefixes
/// inside another go, and two halves of one prefix become that prefix, until nothing changes
/// (a cluster's per-Node /24s of one /16 become a few prefixes, or the /16). Sorted.
pub fn summarize(prefixes: impl IntoIterator<Item = Prefix>) -> Vec<Prefix> {
    let mut list: Vec<Prefix> = prefixes.into_iter().collect();
    loop {
        list.sort();
        list.dedup();
        // Sorted by address then length: a prefix that holds later ones comes first.
        let mut kept: Vec<Prefix> = Vec::with_capacity(list.len());
        for p in list {
            if !kept.last().is_some_and(|k| k.contains(&p)) {
                kept.push(p);
            }
        }
        let mut merged = Vec::with_capacity(kept.len());
        let mut changed = false;
        let mut i = 0;
        while i < kept.len() {
            let p = kept[i];
            if let Some(q) = kept.get(i + 1)
                && p.len == q.len
                && p.len > 0
            {
                let parent = Prefix::new(p.addr, p.len - 1);
                if parent.addr == p.addr && Prefix::new(q.addr, p.len - 1) == parent {
                    merged.push(parent);
                    changed = true;
                    i += 2;
                    continue;
                }
            }
            merged.push(p);
            i += 1;
        }
        list = merged;
        if !changed {
            list.sort();
            return list;
        }
    }
}

#[cfg(test)]
mod summarize_tests {
    use super::*;

    fn p(s: &str) -> Prefix {
        Prefix::parse(s).unwrap()
    }

    #[test]
    fn per_node_prefixes_become_the_ranges_they_fill() {
        let nodes: Vec<Prefix> = (0..=255u8)
            .map(|i| Prefix::new(Ipv4Addr::new(10, 244, i, 0), 24))
            .collect();
        assert_eq!(summarize(nodes.clone()), [p("10.244.0.0/16")]);
        // 300 Nodes of /24s from 10.244.0.0: a /16 and what follows it.
        let more: Vec<Prefix> = (0..300u32)
            .map(|i| {
                Prefix::new(
                    Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 244, 0, 0)) + (i << 8)),
                    24,
                )
            })
            .collect();
        assert_eq!(
            summarize(more),
            [
                p("10.244.0.0/16"),
                p("10.245.0.0/19"),
                p("10.245.32.0/21"),
                p("10.245.40.0/22")
            ]
        );
        // Gaps stay gaps; contained and repeated prefixes go.
        assert_eq!(
            summarize([
                p("10.0.0.0/24"),
                p("10.0.2.0/24"),
                p("10.0.0.0/25"),
                p("10.0.2.0/24")
            ]),
            [p("10.0.0.0/24"), p("10.0.2.0/24")]
        );
        assert_eq!(
            summarize([p("10.0.1.0/24"), p("10.0.2.0/24")]).len(),
            2,
            "not halves of one /23"
        );
    }

    #[test]
    fn the_summary_covers_exactly_the_same_addresses() {
        // Every /28 of 10.0.0.0/20, taken or not by a pseudo-random pattern.
        let mut seed = 0x2545_f491u32;
        for _ in 0..200 {
            let taken: Vec<Prefix> = (0..256u32)
                .filter(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 17;
                    seed ^= seed << 5;
                    !seed.is_multiple_of(3)
                })
                .map(|i| Prefix::new(Ipv4Addr::from((10 << 24) + (i << 4)), 28))
                .collect();
            let summary = summarize(taken.clone());
            for i in 0..4096u32 {
                let ip = Prefix::new(Ipv4Addr::from((10 << 24) + i), 32);
                assert_eq!(
                    taken.iter().any(|t| t.contains(&ip)),
                    summary.iter().any(|s| s.contains(&ip)),
                    "{ip}"
                );
            }
            for (i, a) in summary.iter().enumerate() {
                for b in &summary[i + 1..] {
                    assert!(!a.overlaps(b), "{a} and {b}");
                }
            }
        }
    }
}
