//! mc-agent: loads Strait's eBPF programs, attaches them to the Node's uplink with TCX, and keeps
//! maps and links pinned under a versioned bpffs directory so that a restart (or an upgrade) of
//! the agent replaces the programs atomically without detaching them or resetting any state.

pub mod bpf_sys;
pub mod bpffs;
pub mod config;
pub mod counters;
pub mod dataplane;
pub mod exposure;
pub mod host;
pub mod kube_proxy;
pub mod netfilter;
pub mod pods;
pub mod policy;
pub mod probe;
pub mod reject;
pub mod routes;
pub mod run;
pub mod state;
pub mod sync;
pub mod wireguard;

/// This build's version: the package version, or `STRAIT_BUILD_ID` when the build set it (an
/// operator's own release tag; the upgrade test tells two builds apart by it).
pub const VERSION: &str = match option_env!("STRAIT_BUILD_ID") {
    Some(id) => id,
    None => env!("CARGO_PKG_VERSION"),
};

/// The eBPF object built by `build.rs` from the `mc-ebpf` crate.
pub static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/mc-ebpf"));
