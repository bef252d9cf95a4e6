//! `mcctl init` (in the leader): create the ClusterSet and write the join config for members.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::Args;
use k8s_openapi::api::core::v1::Namespace;
use kube::{Api, ResourceExt as _, api::ListParams};
use mc_api::clusterset::v1alpha2::ClusterSet;
use serde_json::json;

use crate::{
    cluster::{Cluster, explain},
    clusterset::{create_clusterset, leader_join_config},
};

#[derive(Args)]
pub struct InitArgs {
    /// The leader's namespace (where the leader controller runs).
    #[arg(short = 'n', long)]
    namespace: String,
    /// The ClusterSet ID (the name of the ClusterSet in every cluster).
    #[arg(long)]
    clusterset: String,
    /// The leader's own cluster ID.
    #[arg(long)]
    clusterid: String,
    /// Write the join config for members here.
    #[arg(short = 'j', long)]
    join_config_file: Option<PathBuf>,
}

pub async fn init(c: &Cluster, a: InitArgs) -> anyhow::Result<()> {
    let nss: Api<Namespace> = Api::all(c.client.clone());
    if nss
        .get_opt(&a.namespace)
        .await
        .map_err(|e| explain(e, "reading the namespace", &c.server))?
        .is_none()
    {
        bail!(
            "namespace {} does not exist in {}: deploy the leader first (kubectl apply -k deploy/leader)",
            a.namespace,
            c.server
        );
    }
    let sets: Api<ClusterSet> = Api::namespaced(c.client.clone(), &a.namespace);
    let existing = sets
        .list(&ListParams::default())
        .await
        .map_err(|e| explain(e, "listing ClusterSets", &c.server))?;
    if let Some(s) = existing.items.first() {
        if s.name_any() == a.clusterset && s.spec.cluster_id.as_deref() == Some(&a.clusterid) {
            println!(
                "ClusterSet {} already exists in {}",
                a.clusterset, a.namespace
            );
        } else {
            bail!(
                "namespace {} already has ClusterSet {} (cluster ID {:?}); mcctl destroy first",
                a.namespace,
                s.name_any(),
                s.spec.cluster_id
            );
        }
    } else {
        let set: ClusterSet = serde_json::from_value(json!({
            "apiVersion": "multicluster.crd.antrea.io/v1alpha2",
            "kind": "ClusterSet",
            "metadata": {"name": a.clusterset, "namespace": a.namespace},
            "spec": {"clusterID": a.clusterid, "leaders": [{"clusterID": a.clusterid}],
                     "namespace": a.namespace},
        }))?;
        create_clusterset(&sets, &set, &c.server).await?;
        println!(
            "ClusterSet {} created in {} (leader cluster ID {})",
            a.clusterset, a.namespace, a.clusterid
        );
    }
    let config = leader_join_config(c, &a.namespace).await?;
    match &a.join_config_file {
        Some(path) => {
            std::fs::write(path, config.render(None)?)
                .with_context(|| format!("writing {}", path.display()))?;
            println!(
                "join config written to {}; next, per member: mcctl create membertoken <name> -n {} --cluster-id <member ID> -o <token file>",
                path.display(),
                a.namespace
            );
        }
        None => print!("{}", config.render(None)?),
    }
    Ok(())
}
