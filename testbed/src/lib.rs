//! The testbed: real Kubernetes clusters (north, the leader, east and west) on one machine, with
//! Strait's controllers and agents on them (docs/design.md §5), and Strait's container images.
//! Used by xtask (`cargo xtask testbed ...`, `cargo xtask image ...`), the benchmarks
//! (`strait-bench`) and the black-box tests (`mc-integration`: where the testbed keeps its
//! state, its clusters' names).
//!
//! Modules, each using only those above it in this list (no cycles):
//! - [`paths`], [`topology`], [`proc`]: where things are, the clusters and Nodes, processes;
//! - [`cargo`]: building the workspace's binaries; `pki`; [`shared`]: helpers of every part;
//! - [`image`]: the images (`images/<name>/Containerfile`);
//! - `runtime`, `pods`, [`controllers`], `incluster`, `nodes`: the Nodes' containerd and
//!   kubelets, Pods, Strait as processes or in Pods, the Nodes;
//! - `lifecycle`: `up`, `down`, `status`; `cli`: the subcommands and their dispatch.

pub mod cargo;
mod cli;
pub mod controllers;
pub mod image;
mod incluster;
mod lifecycle;
mod nodes;
pub mod paths;
mod pki;
mod pods;
pub mod proc;
mod runtime;
pub mod shared;
pub mod topology;

pub use cli::{NodeCommand, PodCommand, TestbedCommand, run};
pub use shared::{admin_kubeconfig, kubelet_mode};
