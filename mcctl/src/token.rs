//! `mcctl create membertoken` and `mcctl delete membertoken` (in the leader): a member's
//! ServiceAccount, RoleBinding and token Secret, and the member's copy of that Secret.

use std::{
    collections::BTreeMap,
    io::Write as _,
    path::Path,
    path::PathBuf,
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::Subcommand;
use k8s_openapi::api::{
    core::v1::{Secret, ServiceAccount},
    rbac::v1::{Role, RoleBinding},
};
use kube::{
    Api, Resource, ResourceExt as _,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
};
use mc_api::names::annotations;
use serde_json::{Value, json};

use crate::{
    cluster::{Cluster, explain},
    created::{Rollback, created_by_mcctl},
};

const MEMBER_ROLE: &str = "antrea-mc-member-cluster-role";

#[derive(Subcommand)]
pub enum Token {
    /// A member's ServiceAccount, RoleBinding and token Secret in the leader.
    #[command(alias = "membertokens")]
    Membertoken {
        name: String,
        /// The leader's namespace.
        #[arg(short = 'n', long)]
        namespace: String,
        /// The member's cluster ID: the token may speak for this cluster only (create).
        #[arg(long)]
        cluster_id: Option<String>,
        /// Write the member's copy of the token Secret here (mode 0600) (create).
        #[arg(short = 'o', long)]
        output_file: Option<PathBuf>,
    },
}

/// `mcctl create membertoken`: the cluster ID is required (the token may speak for it only).
pub async fn create(c: &Cluster, t: Token) -> anyhow::Result<()> {
    let Token::Membertoken {
        name,
        namespace,
        cluster_id,
        output_file,
    } = t;
    let Some(id) = cluster_id else {
        bail!("--cluster-id is required: the member's cluster ID, which the token may speak for");
    };
    create_token(c, &namespace, &name, &id, output_file.as_deref()).await
}

/// `mcctl delete membertoken`.
pub async fn delete(c: &Cluster, t: Token) -> anyhow::Result<()> {
    let Token::Membertoken {
        name, namespace, ..
    } = t;
    delete_token(c, &namespace, &name).await
}

/// The member's copy of a token Secret: type Opaque, `ca.crt` and `token`, no namespace.
pub async fn member_secret(c: &Cluster, ns: &str, name: &str) -> anyhow::Result<Value> {
    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), ns);
    let s = secrets
        .get_opt(name)
        .await
        .map_err(|e| explain(e, &format!("reading Secret {ns}/{name}"), &c.server))?
        .with_context(|| format!("no member token {name} in namespace {ns}: mcctl create membertoken {name} -n {ns} --cluster-id <member>"))?;
    let data = s.data.unwrap_or_default();
    let field = |k: &str| {
        data.get(k)
            .map(|b| base64_encode(&b.0))
            .with_context(|| format!("Secret {ns}/{name} has no {k} yet"))
    };
    Ok(json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "annotations": {annotations::CREATED_BY_CLI: "true"}},
        "type": "Opaque",
        "data": {"ca.crt": field("ca.crt")?, "token": field("token")?},
    }))
}

fn base64_encode(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn write_private(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    // An existing file keeps its mode on open: tighten it.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

async fn create_token(
    c: &Cluster,
    ns: &str,
    name: &str,
    cluster_id: &str,
    output_file: Option<&Path>,
) -> anyhow::Result<()> {
    if cluster_id.len() > 253 || !cluster_id.split('.').all(mc_api::names::dns1123_label) {
        bail!("cluster ID {cluster_id:?} is not a valid name (lowercase letters, digits and '-')");
    }
    let roles: Api<Role> = Api::namespaced(c.client.clone(), ns);
    if roles
        .get_opt(MEMBER_ROLE)
        .await
        .map_err(|e| explain(e, &format!("reading Role {ns}/{MEMBER_ROLE}"), &c.server))?
        .is_none()
    {
        bail!(
            "namespace {ns} of {} has no Role {MEMBER_ROLE}: is this the leader's namespace? Deploy the leader first (kubectl apply -k deploy/leader)",
            c.server
        );
    }
    let sas: Api<ServiceAccount> = Api::namespaced(c.client.clone(), ns);
    for sa in sas
        .list(&ListParams::default())
        .await
        .map_err(|e| explain(e, "listing ServiceAccounts", &c.server))?
    {
        let Some(id) = sa.annotations().get(annotations::CLUSTER_ID) else {
            continue;
        };
        if sa.name_any() == name {
            if id != cluster_id {
                bail!(
                    "ServiceAccount {ns}/{name} is already bound to cluster ID {id:?}; choose another token name"
                );
            }
            continue;
        }
        if id == cluster_id {
            bail!(
                "cluster ID {cluster_id:?} is already bound to ServiceAccount {ns}/{}: one token per member",
                sa.name_any()
            );
        }
        if mc_api::names::prefix_pair(id, cluster_id) {
            bail!(
                "cluster ID {cluster_id:?} and {id:?} (ServiceAccount {}) differ only by a '-' suffix, which makes export names ambiguous; choose another cluster ID",
                sa.name_any()
            );
        }
    }
    let mut rollback = Rollback::default();
    let result = make_token(c, ns, name, cluster_id, output_file, &mut rollback).await;
    if let Err(e) = result {
        eprintln!("creating member token {name} failed; deleting what was created");
        rollback.run(&c.client).await;
        return Err(e);
    }
    Ok(())
}

async fn make_token(
    c: &Cluster,
    ns: &str,
    name: &str,
    cluster_id: &str,
    output_file: Option<&Path>,
    rollback: &mut Rollback,
) -> anyhow::Result<()> {
    let pp = PostParams::default();
    let sas: Api<ServiceAccount> = Api::namespaced(c.client.clone(), ns);
    let ann: BTreeMap<String, String> = [
        (annotations::CREATED_BY_CLI.to_owned(), "true".to_owned()),
        (annotations::CLUSTER_ID.to_owned(), cluster_id.to_owned()),
    ]
    .into();
    match sas.get_opt(name).await? {
        None => {
            let mut sa = ServiceAccount::default();
            sa.metadata.name = Some(name.into());
            sa.metadata.annotations = Some(ann);
            sas.create(&pp, &sa)
                .await
                .map_err(|e| explain(e, "creating the ServiceAccount", &c.server))?;
            rollback.push::<ServiceAccount>(ns, name);
            println!("ServiceAccount {ns}/{name} created (cluster ID {cluster_id})");
        }
        Some(_) => {
            let patch = json!({"metadata": {"annotations": {annotations::CLUSTER_ID: cluster_id}}});
            sas.patch(name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map_err(|e| explain(e, "binding the ServiceAccount", &c.server))?;
            println!("ServiceAccount {ns}/{name} exists: bound to cluster ID {cluster_id}");
        }
    }
    let rbs: Api<RoleBinding> = Api::namespaced(c.client.clone(), ns);
    if rbs.get_opt(name).await?.is_none() {
        let rb: RoleBinding = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {annotations::CREATED_BY_CLI: "true"}},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": MEMBER_ROLE},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": ns}],
        }))?;
        rbs.create(&pp, &rb)
            .await
            .map_err(|e| explain(e, "creating the RoleBinding", &c.server))?;
        rollback.push::<RoleBinding>(ns, name);
        println!("RoleBinding {ns}/{name} created (Role {MEMBER_ROLE})");
    }
    let secrets: Api<Secret> = Api::namespaced(c.client.clone(), ns);
    let existing = secrets.get_opt(name).await?;
    if let Some(s) = &existing {
        let owner = s
            .annotations()
            .get("kubernetes.io/service-account.name")
            .map(String::as_str);
        if s.type_.as_deref() != Some("kubernetes.io/service-account-token") || owner != Some(name)
        {
            bail!(
                "Secret {ns}/{name} exists and is not the token of ServiceAccount {name}; choose another token name"
            );
        }
    }
    if existing.is_none() {
        let s: Secret = serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": {
                annotations::CREATED_BY_CLI: "true",
                "kubernetes.io/service-account.name": name,
            }},
            "type": "kubernetes.io/service-account-token",
        }))?;
        secrets
            .create(&pp, &s)
            .await
            .map_err(|e| explain(e, "creating the token Secret", &c.server))?;
        rollback.push::<Secret>(ns, name);
        println!("Secret {ns}/{name} created");
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let member_copy = loop {
        match member_secret(c, ns, name).await {
            Ok(s) => break s,
            Err(e) if Instant::now() > deadline => {
                return Err(e.context(
                    "the token controller did not fill the token in within 10 s (is kube-controller-manager running?)",
                ));
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(300)).await,
        }
    };
    if let Some(path) = output_file {
        write_private(path, &serde_yaml::to_string(&member_copy)?)?;
        println!(
            "the member's token Secret is in {} (mode 0600): mcctl join --token-secret-file {} ... in the member",
            path.display(),
            path.display()
        );
    }
    Ok(())
}

async fn delete_token(c: &Cluster, ns: &str, name: &str) -> anyhow::Result<()> {
    let dp = DeleteParams::background();
    let mut found = false;
    macro_rules! remove {
        ($k:ty) => {{
            let a: Api<$k> = Api::namespaced(c.client.clone(), ns);
            let kind = <$k as Resource>::kind(&());
            if let Some(o) = a.get_opt(name).await? {
                found = true;
                if created_by_mcctl(&o) {
                    a.delete(name, &dp)
                        .await
                        .map_err(|e| explain(e, &format!("deleting {kind}"), &c.server))?;
                    println!("{kind} {ns}/{name} deleted");
                } else {
                    println!("{kind} {ns}/{name} was not created by mcctl: left alone");
                }
            }
        }};
    }
    remove!(Secret);
    remove!(RoleBinding);
    remove!(ServiceAccount);
    if !found {
        bail!("no member token {name} in namespace {ns}");
    }
    Ok(())
}
