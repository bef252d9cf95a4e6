//! `mcctl join` (in a member): create the token Secret and the ClusterSet from a join config
//! and flags, wait until the leader accepts this cluster, and roll back what was created when it
//! does not.

use std::{
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Args;
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, ResourceExt as _,
    api::{ListParams, PostParams},
};
use mc_api::{clusterset::v1alpha2::ClusterSet, names::annotations};
use serde_json::{Value, json};

use crate::{
    cluster::{Cluster, explain},
    clusterset::create_clusterset,
    created::Rollback,
    joinconfig::JoinConfig,
};

#[derive(Args)]
pub struct JoinArgs {
    /// A join config (from `mcctl init -j` or `mcctl get joinconfig`); flags override it.
    #[arg(short = 'f', long)]
    config_file: Option<PathBuf>,
    #[arg(long)]
    clusterset: Option<String>,
    /// This member's cluster ID.
    #[arg(long)]
    clusterid: Option<String>,
    /// The member controller's namespace.
    #[arg(short = 'n', long)]
    namespace: Option<String>,
    #[arg(long)]
    leader_clusterid: Option<String>,
    #[arg(long)]
    leader_namespace: Option<String>,
    #[arg(long)]
    leader_apiserver: Option<String>,
    /// The token Secret's name in this cluster.
    #[arg(long)]
    token_secret_name: Option<String>,
    /// The token Secret file `mcctl create membertoken -o` wrote; created here.
    #[arg(long)]
    token_secret_file: Option<PathBuf>,
    /// Seconds to wait for the leader to accept this cluster before rolling back.
    #[arg(long, default_value_t = 60)]
    timeout: u64,
}

/// What `mcctl join` does, from its flags over its join config.
struct Plan {
    clusterset: String,
    cluster_id: String,
    leader_id: String,
    leader_ns: String,
    server: String,
    /// The member controller's namespace.
    ns: String,
    /// The token Secret to create (None: the Secret `secret_name` is already here).
    secret_doc: Option<Value>,
    secret_name: String,
    timeout: u64,
}

fn pick(flag: Option<String>, file: &str, what: &str, hint: &str) -> anyhow::Result<String> {
    match flag {
        Some(v) if !v.is_empty() => Ok(v),
        _ if !file.is_empty() => Ok(file.to_owned()),
        _ => bail!("{what} is missing: pass {hint} or a join config with -f"),
    }
}

/// The settings from the flags, else the join config: an error names the first one missing.
fn plan(a: JoinArgs) -> anyhow::Result<Plan> {
    let (file, file_secret) = match &a.config_file {
        Some(p) => JoinConfig::parse(
            &std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?,
        )
        .with_context(|| format!("in {}", p.display()))?,
        None => Default::default(),
    };
    let clusterset = pick(
        a.clusterset,
        &file.clusterset_id,
        "the ClusterSet ID",
        "--clusterset",
    )?;
    let cluster_id = pick(
        a.clusterid,
        &file.cluster_id,
        "this cluster's ID",
        "--clusterid",
    )?;
    let leader_id = pick(
        a.leader_clusterid,
        &file.leader_cluster_id,
        "the leader's cluster ID",
        "--leader-clusterid",
    )?;
    let leader_ns = pick(
        a.leader_namespace,
        &file.leader_namespace,
        "the leader's namespace",
        "--leader-namespace",
    )?;
    let server = pick(
        a.leader_apiserver,
        &file.leader_api_server,
        "the leader's API server",
        "--leader-apiserver",
    )?;
    let ns = a
        .namespace
        .or_else(|| (!file.namespace.is_empty()).then(|| file.namespace.clone()))
        .unwrap_or_else(|| "kube-system".into());
    let secret_doc = token_secret_doc(
        a.token_secret_file.as_deref(),
        a.config_file.as_deref(),
        &file,
        file_secret,
    )?;
    let secret_name = a
        .token_secret_name
        .or_else(|| (!file.token_secret_name.is_empty()).then(|| file.token_secret_name.clone()))
        .or_else(|| {
            secret_doc
                .as_ref()
                .and_then(|s| s["metadata"]["name"].as_str().map(str::to_owned))
        })
        .context("the token Secret is missing: pass --token-secret-file (from mcctl create membertoken -o) or --token-secret-name")?;
    Ok(Plan {
        clusterset,
        cluster_id,
        leader_id,
        leader_ns,
        server,
        ns,
        secret_doc,
        secret_name,
        timeout: a.timeout,
    })
}

/// The token Secret file: --token-secret-file, else the config's tokenSecretFile (relative to
/// the config file), else a Secret document inside the config.
fn token_secret_doc(
    flag: Option<&Path>,
    config_file: Option<&Path>,
    file: &JoinConfig,
    file_secret: Option<Value>,
) -> anyhow::Result<Option<Value>> {
    let config_file_token = (!file.token_secret_file.is_empty()).then(|| {
        let p = PathBuf::from(&file.token_secret_file);
        match config_file.and_then(|c| c.parent()) {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p,
        }
    });
    Ok(match (flag.or(config_file_token.as_deref()), file_secret) {
        (Some(p), _) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            Some(
                serde_yaml::from_str::<Value>(&text)
                    .with_context(|| format!("in {}", p.display()))?,
            )
        }
        (None, s) => s,
    })
}

pub async fn join(c: &Cluster, a: JoinArgs) -> anyhow::Result<()> {
    let p = plan(a)?;
    let ns = &p.ns;
    let sets: Api<ClusterSet> = Api::namespaced(c.client.clone(), ns);
    let existing = sets
        .list(&ListParams::default())
        .await
        .map_err(|e| explain(e, "listing ClusterSets", &c.server))?;
    if let Some(s) = existing.items.first() {
        bail!(
            "this cluster already has ClusterSet {} in {ns}: mcctl leave first",
            s.name_any()
        );
    }
    let mut rollback = Rollback::default();
    let result = async {
        put_token_secret(c, &p, &mut rollback).await?;
        let (clusterset, leader_id, server) = (&p.clusterset, &p.leader_id, &p.server);
        let set: ClusterSet = serde_json::from_value(json!({
            "apiVersion": "multicluster.crd.antrea.io/v1alpha2",
            "kind": "ClusterSet",
            "metadata": {"name": clusterset, "namespace": ns},
            "spec": {"clusterID": p.cluster_id, "namespace": p.leader_ns,
                     "leaders": [{"clusterID": leader_id, "server": server, "secret": p.secret_name}]},
        }))?;
        create_clusterset(&sets, &set, &c.server).await?;
        rollback.push::<ClusterSet>(ns, clusterset);
        println!("ClusterSet {ns}/{clusterset} created; waiting up to {} s for the leader {leader_id} at {server}", p.timeout);
        wait_accepted(&sets, &p).await
    }
    .await;
    if let Err(e) = result {
        eprintln!("Failed to join the ClusterSet: {e:#}. Deleting the created resources");
        rollback.run(&c.client).await;
        bail!("join failed: {e:#}");
    }
    Ok(())
}

/// Creates the token Secret from its file (marked as mcctl's, for `leave`), or checks that the
/// Secret named is here when there is no file.
async fn put_token_secret(c: &Cluster, p: &Plan, rollback: &mut Rollback) -> anyhow::Result<()> {
    let (ns, secret_name) = (&p.ns, &p.secret_name);
    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), ns);
    match &p.secret_doc {
        Some(doc) => {
            let mut doc = doc.clone();
            if !doc.is_object() {
                bail!(
                    "the token Secret file is not a Secret manifest (mcctl create membertoken -o writes one)"
                );
            }
            if !doc["metadata"].is_object() {
                doc["metadata"] = json!({});
            }
            if !doc["metadata"]["annotations"].is_object() {
                doc["metadata"]["annotations"] = json!({});
            }
            doc["metadata"]["name"] = json!(secret_name);
            doc["metadata"]["namespace"] = json!(ns);
            doc["metadata"]["annotations"][annotations::CREATED_BY_CLI] = json!("true");
            let s: Secret = serde_json::from_value(doc).context("the token Secret file")?;
            if secrets.get_opt(secret_name).await?.is_some() {
                bail!(
                    "Secret {ns}/{secret_name} already exists: delete it or pass --token-secret-name without a file to use it"
                );
            }
            secrets
                .create(&PostParams::default(), &s)
                .await
                .map_err(|e| explain(e, "creating the token Secret", &c.server))?;
            rollback.push::<Secret>(ns, secret_name);
            println!("Secret {ns}/{secret_name} created");
        }
        None => {
            if secrets.get_opt(secret_name).await?.is_none() {
                bail!("Secret {ns}/{secret_name} does not exist: pass --token-secret-file");
            }
        }
    }
    Ok(())
}

/// Waits until the ClusterSet's status says the leader is Ready (it accepted this cluster); an
/// error with the last status seen after the timeout.
async fn wait_accepted(sets: &Api<ClusterSet>, p: &Plan) -> anyhow::Result<()> {
    let (clusterset, cluster_id, leader_id) = (&p.clusterset, &p.cluster_id, &p.leader_id);
    let deadline = Instant::now() + Duration::from_secs(p.timeout);
    let mut last =
        String::from("no status yet (is the member controller running in this namespace?)");
    loop {
        if let Some(s) = sets.get_opt(clusterset).await? {
            let leader = s.status.as_ref().and_then(|st| {
                st.cluster_statuses
                    .iter()
                    .find(|cs| cs.cluster_id.as_deref() == Some(leader_id))
            });
            if let Some(ready) = leader.and_then(|l| {
                l.conditions
                    .iter()
                    .find(|c| c.type_.as_deref() == Some("Ready"))
            }) {
                if ready.status.as_deref() == Some("True") {
                    println!(
                        "joined: the leader {leader_id} accepted {cluster_id} in ClusterSet {clusterset}"
                    );
                    return Ok(());
                }
                last = format!(
                    "Ready={} {}: {}",
                    ready.status.clone().unwrap_or_default(),
                    ready.reason.clone().unwrap_or_default(),
                    ready.message.clone().unwrap_or_default()
                );
            }
        }
        if Instant::now() > deadline {
            bail!(
                "the leader did not accept this cluster within {} s; last status: {last}",
                p.timeout
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}
