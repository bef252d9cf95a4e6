//! Strait's API: the CRD types of Antrea Multi-cluster, wire-compatible (same groups, versions,
//! kinds, JSON field names, printer columns), plus the `crd.antrea.io` ClusterNetworkPolicy and
//! Tier subset needed to store and replicate ACNPs, naming helpers and the controller config.
//!
//! Embedded Kubernetes objects (a ServiceSpec, Endpoints subsets, an ACNP spec) are typed in Rust
//! but their schema is left open (`x-kubernetes-preserve-unknown-fields`), as they are validated
//! by the API of the object they describe, not by ours.

// kube's `printcolumn(name = .., type_ = ..)` repeats keys across columns by design.
#![allow(clippy::duplicated_attributes)]

pub mod antrea;
pub mod clusterclaim;
pub mod clusterinfo;
pub mod clusterset;
pub mod conditions;
pub mod config;
pub mod crdgen;
pub mod exports;
pub mod gateway;
pub mod imports;
pub mod labelidentity;
pub mod mcs;
pub mod memberclusterannounce;
pub mod names;
pub mod net;
pub mod parsed;
mod schema;
pub mod selector;

/// API group of Strait's (Antrea's) multi-cluster CRDs.
pub const GROUP: &str = "multicluster.crd.antrea.io";
/// API group of the Multi-cluster Services API (ServiceExport, ServiceImport).
pub const MCS_GROUP: &str = "multicluster.x-k8s.io";
