//! Types and constants shared by the eBPF programs (`mc-ebpf`) and user space (`mc-agent`).
//!
//! Every type that crosses the kernel/user boundary is `#[repr(C)]`, `Copy`, has no implicit
//! padding (a `const` assertion checks each size) and implements `aya::Pod` only with the `user`
//! feature. Changing a layout means bumping [`PIN_VERSION`], because pinned maps outlive the agent.
#![no_std]

pub mod counters;

pub use counters::{Counter, CounterValue};

/// Version component of the pin directory (`/sys/fs/bpf/mc/<PIN_VERSION>/`). Bump it whenever the
/// layout of a pinned map changes, so a new agent never reuses a map it would misread.
pub const PIN_VERSION: &str = "v1";

/// Default pin root on a Node.
pub const DEFAULT_PIN_ROOT: &str = "/sys/fs/bpf/mc/v1";

/// Names of the programs in the eBPF object (at most 15 characters: the kernel truncates).
pub mod programs {
    /// TC classifier for the uplink, attached at ingress and at egress.
    pub const UPLINK: &str = "mc_uplink";
}

/// Names of the maps in the eBPF object; they are also the file names of their pins.
pub mod maps {
    /// Per-CPU verdict and drop-reason counters ([`crate::Counter`] indexes it).
    pub const COUNTERS: &str = "mc_counters";
    /// Every map the agent pins, for iteration.
    pub const ALL: &[&str] = &[COUNTERS];
}
