//! `mcctl get`: ClusterSets, ResourceExports, ResourceImports and member tokens as tables or
//! manifests, and the leader's join config.

use anyhow::bail;
use clap::{Args, Subcommand};
use k8s_openapi::api::core::v1::Secret;
use kube::{ResourceExt as _, api::ListParams};
use mc_api::{
    clusterinfo::ClusterInfoImport,
    clusterset::{ClusterStatus, v1alpha2::ClusterSet},
    exports::ResourceExport,
    imports::ResourceImport,
    names::labels,
};

use crate::{
    cluster::{Cluster, list},
    clusterset::leader_join_config,
    created::created_by_mcctl,
    output::{self, Format, table},
    token::member_secret,
};

#[derive(Args)]
pub struct Scope {
    /// Namespace (default: all namespaces).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    /// All namespaces (the default without -n).
    #[arg(short = 'A', long)]
    all_namespaces: bool,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    output: Format,
}

#[derive(Subcommand)]
pub enum Get {
    /// ClusterSets: one row per cluster and condition.
    #[command(alias = "clustersets")]
    Clusterset {
        name: Option<String>,
        #[command(flatten)]
        scope: Scope,
    },
    /// ResourceExports (in the leader).
    #[command(aliases = ["resourceexports", "re"])]
    Resourceexport {
        name: Option<String>,
        #[command(flatten)]
        scope: Scope,
        /// Only the exports of this cluster.
        #[arg(long)]
        cluster_id: Option<String>,
    },
    /// ResourceImports (in the leader).
    #[command(aliases = ["resourceimports", "ri"])]
    Resourceimport {
        name: Option<String>,
        #[command(flatten)]
        scope: Scope,
    },
    /// Member tokens made by `mcctl create membertoken` (in the leader).
    #[command(alias = "membertokens")]
    Membertoken {
        name: Option<String>,
        #[command(flatten)]
        scope: Scope,
    },
    /// The join config of the leader's ClusterSet, for `mcctl join -f`.
    Joinconfig {
        /// The leader's namespace.
        #[arg(short = 'n', long)]
        namespace: String,
        /// Add this member token's Secret to the config.
        #[arg(long)]
        member_token: Option<String>,
    },
}

pub async fn get(c: &Cluster, g: Get) -> anyhow::Result<()> {
    match g {
        Get::Clusterset { name, scope } => get_clustersets(c, name, scope).await,
        Get::Resourceexport {
            name,
            scope,
            cluster_id,
        } => get_exports(c, name, scope, cluster_id).await,
        Get::Resourceimport { name, scope } => get_imports(c, name, scope).await,
        Get::Membertoken { name, scope } => get_tokens(c, name, scope).await,
        Get::Joinconfig {
            namespace,
            member_token,
        } => get_joinconfig(c, namespace, member_token).await,
    }
}

async fn get_clustersets(c: &Cluster, name: Option<String>, scope: Scope) -> anyhow::Result<()> {
    let ns = scope_ns(&scope);
    let sets: Vec<ClusterSet> =
        list(c, ns, name.as_deref(), &ListParams::default(), "ClusterSet").await?;
    if scope.output != Format::Table {
        return print_objects(scope.output, &sets, name.is_some());
    }
    if sets.is_empty() {
        none_found("ClusterSet", ns);
        return Ok(());
    }
    // A leader has none; a member's gateway agent writes their TunnelUp. Not readable
    // (RBAC, no CRD): the control plane's rows alone.
    let infos: Vec<ClusterInfoImport> =
        list(c, ns, None, &ListParams::default(), "ClusterInfoImport")
            .await
            .unwrap_or_default();
    print!(
        "{}",
        table(
            &[
                "CLUSTER-ID",
                "NAMESPACE",
                "CLUSTERSET-ID",
                "TYPE",
                "STATUS",
                "REASON"
            ],
            &clusterset_rows(&sets, &infos)
        )
    );
    Ok(())
}

async fn get_exports(
    c: &Cluster,
    name: Option<String>,
    scope: Scope,
    cluster_id: Option<String>,
) -> anyhow::Result<()> {
    let ns = scope_ns(&scope);
    let mut lp = ListParams::default();
    if let Some(id) = &cluster_id {
        lp = lp.labels(&format!("{}={id}", labels::SOURCE_CLUSTER_ID));
    }
    let res: Vec<ResourceExport> = list(c, ns, name.as_deref(), &lp, "ResourceExport").await?;
    if scope.output != Format::Table {
        return print_objects(scope.output, &res, name.is_some());
    }
    if res.is_empty() {
        none_found("ResourceExport", ns);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = res
        .iter()
        .map(|r| {
            vec![
                r.labels()
                    .get(labels::SOURCE_CLUSTER_ID)
                    .cloned()
                    .unwrap_or_default(),
                r.namespace().unwrap_or_default(),
                r.name_any(),
                r.spec.kind.clone().unwrap_or_default(),
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["CLUSTER-ID", "NAMESPACE", "NAME", "KIND"], &rows)
    );
    Ok(())
}

async fn get_imports(c: &Cluster, name: Option<String>, scope: Scope) -> anyhow::Result<()> {
    let ns = scope_ns(&scope);
    let ris: Vec<ResourceImport> = list(
        c,
        ns,
        name.as_deref(),
        &ListParams::default(),
        "ResourceImport",
    )
    .await?;
    if scope.output != Format::Table {
        return print_objects(scope.output, &ris, name.is_some());
    }
    if ris.is_empty() {
        none_found("ResourceImport", ns);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = ris
        .iter()
        .map(|r| {
            vec![
                r.namespace().unwrap_or_default(),
                r.name_any(),
                r.spec.kind.clone().unwrap_or_default(),
            ]
        })
        .collect();
    print!("{}", table(&["NAMESPACE", "NAME", "KIND"], &rows));
    Ok(())
}

async fn get_tokens(c: &Cluster, name: Option<String>, scope: Scope) -> anyhow::Result<()> {
    let ns = scope_ns(&scope);
    let mut secrets: Vec<Secret> = list(
        c,
        ns,
        None,
        &ListParams::default().fields("type=kubernetes.io/service-account-token"),
        "Secret",
    )
    .await?;
    secrets.retain(created_by_mcctl);
    if let Some(n) = &name {
        secrets.retain(|s| s.name_any() == *n);
        if secrets.is_empty() {
            bail!("no member token named {n}");
        }
    }
    if scope.output != Format::Table {
        // The token itself stays out of listings; `get joinconfig --member-token` or
        // `create membertoken -o` hand it over.
        for s in &mut secrets {
            s.data = None;
        }
        return print_objects(scope.output, &secrets, name.is_some());
    }
    if secrets.is_empty() {
        none_found("member token", ns);
        return Ok(());
    }
    let rows: Vec<Vec<String>> = secrets
        .iter()
        .map(|s| vec![s.namespace().unwrap_or_default(), s.name_any()])
        .collect();
    print!("{}", table(&["NAMESPACE", "NAME"], &rows));
    Ok(())
}

async fn get_joinconfig(
    c: &Cluster,
    namespace: String,
    member_token: Option<String>,
) -> anyhow::Result<()> {
    let config = leader_join_config(c, &namespace).await?;
    let secret = match &member_token {
        Some(t) => {
            let mut cfg = config.clone();
            cfg.token_secret_name = t.clone();
            let s = member_secret(c, &namespace, t).await?;
            print!("{}", cfg.render(Some(&s))?);
            return Ok(());
        }
        None => None,
    };
    print!("{}", config.render(secret)?);
    Ok(())
}

fn scope_ns(s: &Scope) -> Option<&str> {
    if s.all_namespaces {
        None
    } else {
        s.namespace.as_deref()
    }
}

fn print_objects<K: serde::Serialize>(
    format: Format,
    items: &[K],
    single: bool,
) -> anyhow::Result<()> {
    let values = items
        .iter()
        .map(|o| serde_json::to_value(o).map(output::clean))
        .collect::<Result<Vec<_>, _>>()?;
    print!("{}", output::objects(format, values, single)?);
    Ok(())
}

fn none_found(what: &str, ns: Option<&str>) {
    match ns {
        Some(ns) => eprintln!("No {what} found in Namespace {ns}"),
        None => eprintln!("No {what} found"),
    }
}

/// One row per (cluster status x condition); a ClusterSet without status gets one row with
/// empty condition columns. In a member, each remote cluster's ClusterInfoImport in the
/// ClusterSet's namespace adds its dataplane's state: the gateway's `TunnelUp` (its probes
/// through the tunnel answered, or not).
pub fn clusterset_rows(sets: &[ClusterSet], infos: &[ClusterInfoImport]) -> Vec<Vec<String>> {
    let mut rows = Vec::new();
    for s in sets {
        let ns = s.namespace().unwrap_or_default();
        let statuses = s
            .status
            .as_ref()
            .map(|st| st.cluster_statuses.as_slice())
            .unwrap_or_default();
        if statuses.is_empty() {
            rows.push(vec![
                s.spec.cluster_id.clone().unwrap_or_default(),
                ns.clone(),
                s.name_any(),
                String::new(),
                String::new(),
                String::new(),
            ]);
        }
        // The ClusterSet's own conditions (a member's Ready and DataplaneReady), under its own
        // cluster ID, then one row per cluster it knows and condition.
        let own = s.status.as_ref().map(|st| st.conditions.as_slice());
        let own = ClusterStatus {
            cluster_id: s.spec.cluster_id.clone(),
            conditions: own.unwrap_or_default().to_vec(),
        };
        for cs in std::iter::once(&own).chain(statuses) {
            for c in &cs.conditions {
                rows.push(vec![
                    cs.cluster_id.clone().unwrap_or_default(),
                    ns.clone(),
                    s.name_any(),
                    c.type_.clone().unwrap_or_default(),
                    c.status.clone().unwrap_or_default(),
                    c.reason.clone().unwrap_or_default(),
                ]);
            }
        }
        for info in infos
            .iter()
            .filter(|i| i.namespace().as_deref() == Some(ns.as_str()))
        {
            for c in info.status.iter().flat_map(|st| &st.conditions) {
                rows.push(vec![
                    info.spec.0.cluster_id.clone().unwrap_or_default(),
                    ns.clone(),
                    s.name_any(),
                    c.type_.clone().unwrap_or_default(),
                    c.status.clone().unwrap_or_default(),
                    c.reason.clone().unwrap_or_default(),
                ]);
            }
        }
    }
    rows
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn one_row_per_cluster_and_condition() {
        let set: ClusterSet = serde_json::from_value(json!({
            "metadata": {"name": "set", "namespace": "kube-system"},
            "spec": {"clusterID": "east", "leaders": [{"clusterID": "north"}]},
            "status": {
                "conditions": [
                    {"type": "Ready", "status": "False", "reason": "DataplaneNotReady"},
                    {"type": "DataplaneReady", "status": "False", "reason": "NotReady"}],
                "clusterStatuses": [{"clusterID": "north", "conditions": [
                    {"type": "Ready", "status": "True", "reason": "Connected"},
                    {"type": "IsLeader", "status": "True"}]}]}
        }))
        .unwrap();
        let west: ClusterInfoImport = serde_json::from_value(json!({
            "apiVersion": "multicluster.crd.antrea.io/v1alpha1",
            "kind": "ClusterInfoImport",
            "metadata": {"name": "west-clusterinfo", "namespace": "kube-system"},
            "spec": {"clusterID": "west", "serviceCIDR": "10.98.0.0/16"},
            "status": {"conditions": [
                {"type": "TunnelUp", "status": "False", "reason": "NoAnswer"}]}
        }))
        .unwrap();
        let rows = clusterset_rows(std::slice::from_ref(&set), std::slice::from_ref(&west));
        assert_eq!(rows.len(), 5);
        assert_eq!(
            rows[4],
            [
                "west",
                "kube-system",
                "set",
                "TunnelUp",
                "False",
                "NoAnswer"
            ]
        );
        assert_eq!(
            rows[0],
            [
                "east",
                "kube-system",
                "set",
                "Ready",
                "False",
                "DataplaneNotReady"
            ]
        );
        assert_eq!(
            rows[1],
            [
                "east",
                "kube-system",
                "set",
                "DataplaneReady",
                "False",
                "NotReady"
            ]
        );
        assert_eq!(
            rows[2],
            ["north", "kube-system", "set", "Ready", "True", "Connected"]
        );
        let mut bare = set;
        bare.status = None;
        assert_eq!(
            clusterset_rows(&[bare], &[]),
            vec![vec!["east", "kube-system", "set", "", "", ""]]
        );
    }
}
