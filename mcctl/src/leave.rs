//! `mcctl leave` (in a member) and `mcctl destroy` (in the leader): delete the ClusterSet, wait
//! until it is gone, then delete what mcctl created in its namespace.

use std::time::{Duration, Instant};

use anyhow::bail;
use clap::Args;
use k8s_openapi::api::{
    core::v1::{Secret, ServiceAccount},
    rbac::v1::RoleBinding,
};
use kube::{
    Api, ResourceExt as _,
    api::{DeleteParams, ListParams},
};
use mc_api::clusterset::v1alpha2::ClusterSet;

use crate::{
    cluster::{Cluster, explain, list},
    created::created_by_mcctl,
};

#[derive(Args)]
pub struct LeaveArgs {
    /// The ClusterSet (default: the only one in the namespace).
    #[arg(long)]
    clusterset: Option<String>,
    /// The controller's namespace (member default kube-system).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
}

/// `mcctl leave`: the member's ClusterSet (namespace default kube-system) and token copies.
pub async fn member(c: &Cluster, a: LeaveArgs) -> anyhow::Result<()> {
    let ns = a.namespace.clone().unwrap_or_else(|| "kube-system".into());
    leave(c, &ns, a.clusterset.as_deref(), false).await
}

/// `mcctl destroy`: the leader's ClusterSet, and the member tokens with their RoleBindings and
/// ServiceAccounts.
pub async fn leader(c: &Cluster, a: LeaveArgs) -> anyhow::Result<()> {
    let Some(ns) = a.namespace.clone() else {
        bail!("-n is required: the leader's namespace");
    };
    leave(c, &ns, a.clusterset.as_deref(), true).await
}

async fn leave(c: &Cluster, ns: &str, name: Option<&str>, leader: bool) -> anyhow::Result<()> {
    let sets: Vec<ClusterSet> =
        list(c, Some(ns), name, &ListParams::default(), "ClusterSet").await?;
    let Some(set) = sets.first() else {
        bail!("no ClusterSet in namespace {ns} of {}", c.server);
    };
    let api: Api<ClusterSet> = Api::namespaced(c.client.clone(), ns);
    let name = set.name_any();
    api.delete(&name, &DeleteParams::background())
        .await
        .map_err(|e| explain(e, &format!("deleting ClusterSet {ns}/{name}"), &c.server))?;
    let deadline = Instant::now() + Duration::from_secs(60);
    while api.get_opt(&name).await?.is_some() {
        if Instant::now() > deadline {
            bail!("ClusterSet {ns}/{name} is still there after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    println!("ClusterSet {ns}/{name} deleted");
    // What mcctl made here: token copies in a member; tokens, RoleBindings and ServiceAccounts
    // in the leader.
    let dp = DeleteParams::background();
    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), ns);
    for s in secrets.list(&ListParams::default()).await? {
        if created_by_mcctl(&s) {
            secrets.delete(&s.name_any(), &dp).await?;
            println!("Secret {ns}/{} deleted", s.name_any());
        }
    }
    if leader {
        let rbs: Api<RoleBinding> = Api::namespaced(c.client.clone(), ns);
        for r in rbs.list(&ListParams::default()).await? {
            if created_by_mcctl(&r) {
                rbs.delete(&r.name_any(), &dp).await?;
                println!("RoleBinding {ns}/{} deleted", r.name_any());
            }
        }
        let sas: Api<ServiceAccount> = Api::namespaced(c.client.clone(), ns);
        for s in sas.list(&ListParams::default()).await? {
            if created_by_mcctl(&s) {
                sas.delete(&s.name_any(), &dp).await?;
                println!("ServiceAccount {ns}/{} deleted", s.name_any());
            }
        }
    }
    Ok(())
}
