//! One cluster as mcctl talks to it: the connection (kubeconfig and context, as kubectl reads
//! them), listing its objects, and its API errors explained for an operator.

use std::path::Path;

use anyhow::{Context as _, bail};
use kube::{
    Api, Client, Resource, ResourceExt as _,
    api::ListParams,
    config::{KubeConfigOptions, Kubeconfig},
};

pub struct Cluster {
    pub client: Client,
    pub server: String,
}

/// The kubeconfig at `path`, or the files it lists separated by `:` merged as kubectl merges
/// KUBECONFIG's (the first file to set a value wins).
fn read_kubeconfig(path: &Path) -> anyhow::Result<Kubeconfig> {
    let mut merged: Option<Kubeconfig> = None;
    for p in std::env::split_paths(path.as_os_str()).filter(|p| !p.as_os_str().is_empty()) {
        let kc = Kubeconfig::read_from(&p)
            .with_context(|| format!("reading the kubeconfig {}", p.display()))?;
        merged = Some(match merged {
            None => kc,
            Some(m) => m.merge(kc)?,
        });
    }
    merged.with_context(|| format!("no kubeconfig file in {}", path.display()))
}

pub async fn connect_to(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> anyhow::Result<Cluster> {
    let opts = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..Default::default()
    };
    let config = match kubeconfig {
        Some(path) => {
            let kc = read_kubeconfig(path)?;
            kube::Config::from_custom_kubeconfig(kc, &opts)
                .await
                .with_context(|| match context {
                    Some(c) => format!("context {c} in {}", path.display()),
                    None => format!("the kubeconfig {}", path.display()),
                })?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&opts).await?,
        None => kube::Config::infer()
            .await
            .context("no kubeconfig: pass --kubeconfig or set KUBECONFIG")?,
    };
    let server = config
        .cluster_url
        .to_string()
        .trim_end_matches('/')
        .to_owned();
    Ok(Cluster {
        client: Client::try_from(config)?,
        server,
    })
}

/// An API error explained for an operator.
pub fn explain(e: kube::Error, what: &str, server: &str) -> anyhow::Error {
    match &e {
        kube::Error::Api(s) if s.code == 404 && s.message.contains("the server could not find") => {
            anyhow::anyhow!(
                "{what}: the Strait CRDs are not installed in {server}: kubectl apply -f deploy/crds/"
            )
        }
        kube::Error::Api(s) if s.code == 403 => {
            anyhow::anyhow!("{what}: forbidden by {server}: {}", s.message)
        }
        kube::Error::Api(s) => anyhow::anyhow!("{what}: {}", s.message),
        _ => anyhow::anyhow!(
            "{what}: cannot reach the API server {server}: {e} (check --kubeconfig and --context)"
        ),
    }
}

fn api<K>(c: &Cluster, ns: Option<&str>) -> Api<K>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(c.client.clone(), ns),
        None => Api::all(c.client.clone()),
    }
}

/// The objects of one kind in `ns` (all namespaces when None), sorted by namespace and name;
/// with `name`, only that one (an error when there is none).
pub async fn list<K>(
    c: &Cluster,
    ns: Option<&str>,
    name: Option<&str>,
    lp: &ListParams,
    what: &str,
) -> anyhow::Result<Vec<K>>
where
    K: Resource<Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    let a: Api<K> = api(c, ns);
    let mut items = a
        .list(lp)
        .await
        .map_err(|e| explain(e, &format!("listing {what}"), &c.server))?
        .items;
    if let Some(n) = name {
        items.retain(|o| o.name_any() == n);
        if items.is_empty() {
            let where_ = ns.map_or("any namespace".to_owned(), |n| format!("namespace {n}"));
            bail!("no {what} named {n} in {where_}");
        }
    }
    items.sort_by_key(|o| (o.namespace(), o.name_any()));
    Ok(items)
}
