//! Per-CPU counters: one slot per verdict or drop reason.

/// Packets and bytes seen for one verdict or reason, on one CPU.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CounterValue {
    pub packets: u64,
    pub bytes: u64,
}

const _: () = assert!(core::mem::size_of::<CounterValue>() == 16);

#[cfg(feature = "user")]
// SAFETY: `#[repr(C)]`, two u64 fields, no padding (size asserted above).
unsafe impl aya::Pod for CounterValue {}

/// Number of slots in the counters map. Larger than the number of [`Counter`]s so new reasons can
/// be added without changing the map's layout (and therefore without a new pin version).
pub const COUNTER_SLOTS: u32 = 64;

/// Every verdict and drop reason the programs count. The discriminant is the key in the counters
/// map; it never changes once released.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    /// A frame that is not IPv4 (ARP, IPv6, ...): not Strait's business, passed on.
    PassNotIpv4 = 0,
    /// A well-formed IPv4 packet with nothing for Strait to do, passed on.
    PassIpv4 = 1,
    /// The frame ends inside the Ethernet or IPv4 header.
    DropTruncated = 2,
    /// IPv4 header with a wrong version, a header length under 20 bytes or a total length
    /// shorter than its header.
    DropBadIpv4Header = 3,
}

impl Counter {
    /// Every counter, in key order.
    pub const ALL: [Counter; 4] = [
        Counter::PassNotIpv4,
        Counter::PassIpv4,
        Counter::DropTruncated,
        Counter::DropBadIpv4Header,
    ];

    /// Stable name, used in metrics labels and by `mcctl`.
    pub const fn name(self) -> &'static str {
        match self {
            Counter::PassNotIpv4 => "pass_not_ipv4",
            Counter::PassIpv4 => "pass_ipv4",
            Counter::DropTruncated => "drop_truncated",
            Counter::DropBadIpv4Header => "drop_bad_ipv4_header",
        }
    }

    /// Whether packets counted here were dropped.
    pub const fn is_drop(self) -> bool {
        matches!(self, Counter::DropTruncated | Counter::DropBadIpv4Header)
    }

    pub const fn key(self) -> u32 {
        self as u32
    }

    pub fn from_key(key: u32) -> Option<Counter> {
        Counter::ALL.iter().copied().find(|c| c.key() == key)
    }
}

const _: () = assert!((Counter::ALL.len() as u32) <= COUNTER_SLOTS);
