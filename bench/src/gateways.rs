//! Gateway Nodes without kubelets, for the control-plane bench (whose testbed has no Nodes): in
//! each member a Node object annotated as a gateway candidate, Ready, with its Pod CIDR and the
//! address of the testbed's gateway Node, whose Lease the bench renews as a kubelet would (so
//! the node lifecycle controller keeps it Ready). The member elects it and announces its cluster
//! (ClusterInfo): the leader imports no endpoints of a cluster without an accepted announcement
//! (nothing could route to them).

use std::time::Duration;

use k8s_openapi::{
    api::{coordination::v1::Lease, core::v1::Node},
    apimachinery::pkg::apis::meta::v1::{MicroTime, Time},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams, PostParams},
};
use mc_api::names::annotations;
use serde_json::json;

const NAME: &str = "bench-gateway";
const LEASE_NS: &str = "kube-node-lease";

/// Creates the Node in each `(cluster, client)` and renews its Lease every 10 s while the
/// returned task runs.
pub async fn start(
    members: &[(&str, Client)],
    node_ip: impl Fn(&str) -> (String, String),
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    for (cluster, client) in members {
        let (ip, pod_cidr) = node_ip(cluster);
        let nodes: Api<Node> = Api::all(client.clone());
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": NAME, "annotations": {annotations::GATEWAY: "true"}},
            "spec": {"podCIDR": pod_cidr, "podCIDRs": [pod_cidr]},
        }))?;
        match nodes.create(&PostParams::default(), &node).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        let now = Time(Timestamp::now());
        let status = json!({"status": {
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "a Node the control-plane bench keeps Ready",
                "lastHeartbeatTime": now, "lastTransitionTime": now}],
            "addresses": [{"type": "InternalIP", "address": ip}],
        }});
        nodes
            .patch_status(NAME, &PatchParams::default(), &Patch::Merge(status))
            .await?;
        let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NS);
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": NAME},
            "spec": {"holderIdentity": NAME, "leaseDurationSeconds": 40,
                     "renewTime": MicroTime(Timestamp::now())},
        }))?;
        match leases.create(&PostParams::default(), &lease).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
    }
    let clients: Vec<Client> = members.iter().map(|(_, c)| c.clone()).collect();
    Ok(tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(10)).await;
            for c in &clients {
                let leases: Api<Lease> = Api::namespaced(c.clone(), LEASE_NS);
                let renew = json!({"spec": {"renewTime": MicroTime(Timestamp::now())}});
                if let Err(e) = leases
                    .patch(NAME, &PatchParams::default(), &Patch::Merge(renew))
                    .await
                {
                    eprintln!("bench: renewing the gateway Node's Lease: {e}");
                }
            }
        }
    }))
}

/// Removes the gateway Nodes and their Leases (what [`start`] made; its task aborted first).
pub async fn remove(members: &[Client]) {
    for c in members {
        let nodes: Api<Node> = Api::all(c.clone());
        let leases: Api<Lease> = Api::namespaced(c.clone(), LEASE_NS);
        let dp = kube::api::DeleteParams::default();
        if let Err(e) = nodes.delete(NAME, &dp).await {
            eprintln!("bench: removing the gateway Node: {e}");
        }
        if let Err(e) = leases.delete(NAME, &dp).await {
            eprintln!("bench: removing the gateway Node's Lease: {e}");
        }
    }
}
