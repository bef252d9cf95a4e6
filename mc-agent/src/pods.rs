//! A Pod as the agent reads it from the API. Its own module, below both [`crate::state`] (which
//! gives this Node's Pods their label identities) and [`crate::policy`] (which decides the
//! policies over the cluster's Pods), so that neither of those imports the other for it.

use std::collections::BTreeMap;

/// A Pod of this Node, as read from the API.
#[derive(Clone, Debug, Default)]
pub struct PodObject {
    pub namespace: String,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    /// `status.podIPs`.
    pub ips: Vec<String>,
    /// A host-network Pod shares the Node's address: no identity of its own.
    pub host_network: bool,
    /// Succeeded or Failed: its address may already be another Pod's.
    pub finished: bool,
    /// `status.hostIP`: the address of its Node.
    pub host_ip: Option<String>,
}
