//! `mcctl` — Strait's command line for ClusterSets, the counterpart of `antctl mc`: inspect
//! ClusterSets, exports and imports; make member tokens; set up, join, leave and tear down a
//! ClusterSet. It talks to one cluster at a time (`--kubeconfig`, `--context`).

mod diagnose;
mod joinconfig;
mod member;
mod output;
mod verify;

use std::{
    collections::BTreeMap,
    io::Write as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand};
use k8s_openapi::api::{
    core::v1::{Namespace, Secret, ServiceAccount},
    rbac::v1::{Role, RoleBinding},
};
use kube::{
    Api, Client, Resource, ResourceExt as _,
    api::{DeleteParams, ListParams, Patch, PatchParams, PostParams},
    config::{KubeConfigOptions, Kubeconfig},
};
use mc_api::{
    clusterinfo::ClusterInfoImport,
    clusterset::{ClusterStatus, v1alpha2::ClusterSet},
    exports::ResourceExport,
    imports::ResourceImport,
    names::{annotations, labels},
};
use serde_json::{Value, json};

use joinconfig::JoinConfig;
use output::{Format, table};

const MEMBER_ROLE: &str = "antrea-mc-member-cluster-role";

#[derive(Parser)]
#[command(
    name = "mcctl",
    version,
    about = "Strait multi-cluster command line (the counterpart of antctl mc)"
)]
struct Cli {
    /// The kubeconfig of the cluster to talk to (default: $KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long, global = true, env = "KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, global = true)]
    context: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show ClusterSets, ResourceExports, ResourceImports, member tokens or a join config.
    #[command(subcommand)]
    Get(Get),
    /// Create a member token (in the leader).
    #[command(subcommand)]
    Create(Token),
    /// Delete a member token (in the leader).
    #[command(subcommand)]
    Delete(Token),
    /// Leader: create the ClusterSet and write the join config for members.
    Init(InitArgs),
    /// Member: join a ClusterSet and wait until the leader accepts this cluster.
    Join(JoinArgs),
    /// Member: leave the ClusterSet and remove what mcctl created here.
    Leave(LeaveArgs),
    /// Leader: delete the ClusterSet and the member tokens mcctl created.
    Destroy(LeaveArgs),
    /// Members: send traffic between the members of the contexts given, as applications do
    /// (imported Services by both names, Pod-to-Pod, a full-size transfer); name the first
    /// failing hop; clean up. Exit status 1 when a check fails.
    Verify(verify::VerifyArgs),
    /// Members: read-only checks of what makes traffic cross, with a verdict and a hint each.
    /// Exit status 1 when a check fails.
    Diagnose(diagnose::DiagnoseArgs),
}

#[derive(Args)]
struct Scope {
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
enum Get {
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

#[derive(Subcommand)]
enum Token {
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

#[derive(Args)]
struct InitArgs {
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

#[derive(Args)]
struct JoinArgs {
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

#[derive(Args)]
struct LeaveArgs {
    /// The ClusterSet (default: the only one in the namespace).
    #[arg(long)]
    clusterset: Option<String>,
    /// The controller's namespace (member default kube-system).
    #[arg(short = 'n', long)]
    namespace: Option<String>,
}

#[tokio::main]
async fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(cli).await {
        eprintln!("error: {e:#}");
        std::process::exit(1);
    }
}

struct Cluster {
    client: Client,
    server: String,
}

async fn connect(cli: &Cli) -> anyhow::Result<Cluster> {
    connect_to(cli.kubeconfig.as_deref(), cli.context.as_deref()).await
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

async fn connect_to(kubeconfig: Option<&Path>, context: Option<&str>) -> anyhow::Result<Cluster> {
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
fn explain(e: kube::Error, what: &str, server: &str) -> anyhow::Error {
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

/// Whether an API error says the API server could not reach an admission webhook at all (as
/// opposed to the webhook's own refusal).
fn webhook_unreachable(e: &kube::Error) -> bool {
    let kube::Error::Api(s) = e else {
        return false;
    };
    s.message.contains("failed calling webhook")
        && [
            "connection refused",
            "no endpoints available",
            "no route to host",
            "connection reset",
        ]
        .iter()
        .any(|m| s.message.contains(m))
}

/// Creates a ClusterSet, retrying for up to 30 s while its admission webhook cannot be reached:
/// while a controller Pod is replaced (an upgrade, a restart), its webhook Service still names
/// the old Pod until that Pod is gone (it publishes not-ready addresses), so a call can be
/// refused for a second or two.
async fn create_clusterset(
    sets: &Api<ClusterSet>,
    set: &ClusterSet,
    server: &str,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut told = false;
    loop {
        match sets.create(&PostParams::default(), set).await {
            Err(e) if webhook_unreachable(&e) && Instant::now() < deadline => {
                if !told {
                    eprintln!(
                        "  the controller's admission webhook is not reachable yet; retrying for up to 30 s ({e})"
                    );
                    told = true;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(explain(e, "creating the ClusterSet", server)),
            Ok(_) => return Ok(()),
        }
    }
}

/// The members of the contexts given (the current context when none is).
async fn members(cli: &Cli, contexts: &[String]) -> anyhow::Result<Vec<member::Member>> {
    let contexts: Vec<Option<&str>> = if contexts.is_empty() {
        vec![cli.context.as_deref()]
    } else {
        contexts.iter().map(|c| Some(c.as_str())).collect()
    };
    let mut out = Vec::new();
    for ctx in contexts {
        let cluster = connect_to(cli.kubeconfig.as_deref(), ctx).await?;
        out.push(member::Member::load(ctx.unwrap_or("(current)"), cluster).await?);
    }
    Ok(out)
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match &cli.command {
        Command::Verify(a) => {
            let members = members(&cli, &a.contexts).await?;
            if !verify::run(members, a).await? {
                std::process::exit(1);
            }
            return Ok(());
        }
        Command::Diagnose(a) => {
            let members = members(&cli, &a.contexts).await?;
            if !diagnose::run(&members, a).await? {
                std::process::exit(1);
            }
            return Ok(());
        }
        _ => {}
    }
    let cluster = connect(&cli).await?;
    match cli.command {
        Command::Get(g) => get(&cluster, g).await,
        Command::Create(Token::Membertoken {
            name,
            namespace,
            cluster_id,
            output_file,
        }) => {
            let Some(id) = cluster_id else {
                bail!(
                    "--cluster-id is required: the member's cluster ID, which the token may speak for"
                );
            };
            create_token(&cluster, &namespace, &name, &id, output_file.as_deref()).await
        }
        Command::Delete(Token::Membertoken {
            name, namespace, ..
        }) => delete_token(&cluster, &namespace, &name).await,
        Command::Init(a) => init(&cluster, a).await,
        Command::Join(a) => join(&cluster, a).await,
        Command::Leave(a) => {
            let ns = a.namespace.clone().unwrap_or_else(|| "kube-system".into());
            leave(&cluster, &ns, a.clusterset.as_deref(), false).await
        }
        Command::Destroy(a) => {
            let Some(ns) = a.namespace.clone() else {
                bail!("-n is required: the leader's namespace");
            };
            leave(&cluster, &ns, a.clusterset.as_deref(), true).await
        }
        Command::Verify(_) | Command::Diagnose(_) => unreachable!("handled above"),
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

fn scope_ns(s: &Scope) -> Option<&str> {
    if s.all_namespaces {
        None
    } else {
        s.namespace.as_deref()
    }
}

async fn list<K>(
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

fn created_by_mcctl<K: Resource>(o: &K) -> bool {
    o.annotations()
        .get(annotations::CREATED_BY_CLI)
        .is_some_and(|v| v == "true")
}

async fn get(c: &Cluster, g: Get) -> anyhow::Result<()> {
    match g {
        Get::Clusterset { name, scope } => {
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
        }
        Get::Resourceexport {
            name,
            scope,
            cluster_id,
        } => {
            let ns = scope_ns(&scope);
            let mut lp = ListParams::default();
            if let Some(id) = &cluster_id {
                lp = lp.labels(&format!("{}={id}", labels::SOURCE_CLUSTER_ID));
            }
            let res: Vec<ResourceExport> =
                list(c, ns, name.as_deref(), &lp, "ResourceExport").await?;
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
        }
        Get::Resourceimport { name, scope } => {
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
        }
        Get::Membertoken { name, scope } => {
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
        }
        Get::Joinconfig {
            namespace,
            member_token,
        } => {
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
        }
    }
    Ok(())
}

async fn leader_join_config(c: &Cluster, ns: &str) -> anyhow::Result<JoinConfig> {
    let sets: Vec<ClusterSet> =
        list(c, Some(ns), None, &ListParams::default(), "ClusterSet").await?;
    let set = match sets.as_slice() {
        [one] => one,
        [] => bail!(
            "no ClusterSet in namespace {ns} of {}: run mcctl init first",
            c.server
        ),
        _ => bail!("more than one ClusterSet in namespace {ns}"),
    };
    let leader = set
        .spec
        .cluster_id
        .clone()
        .or_else(|| set.spec.leaders.first().and_then(|l| l.cluster_id.clone()))
        .unwrap_or_default();
    Ok(JoinConfig {
        clusterset_id: set.name_any(),
        leader_cluster_id: leader,
        leader_namespace: ns.to_owned(),
        leader_api_server: c.server.clone(),
        ..Default::default()
    })
}

/// The member's copy of a token Secret: type Opaque, `ca.crt` and `token`, no namespace.
async fn member_secret(c: &Cluster, ns: &str, name: &str) -> anyhow::Result<Value> {
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

/// What a command created, deleted again (newest first) when it fails.
#[derive(Default)]
struct Rollback(Vec<(String, Undo)>);

/// Resolves to Ok(true) once the object is gone, Ok(false) while it still exists.
type DeleteFuture = std::pin::Pin<Box<dyn Future<Output = kube::Result<bool>>>>;
type Undo = Box<dyn Fn(Client) -> DeleteFuture>;

impl Rollback {
    fn push<K>(&mut self, ns: &str, name: &str)
    where
        K: Resource<Scope = kube::core::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + 'static,
        K::DynamicType: Default,
    {
        let (ns, name) = (ns.to_owned(), name.to_owned());
        let label = format!("{} {ns}/{name}", K::kind(&Default::default()));
        self.0.push((
            label,
            Box::new(move |client| {
                let (ns, name) = (ns.clone(), name.clone());
                Box::pin(async move {
                    let a: Api<K> = Api::namespaced(client, &ns);
                    match a.delete(&name, &DeleteParams::background()).await {
                        Ok(_) => Ok(false),
                        Err(kube::Error::Api(s)) if s.code == 404 => Ok(true),
                        Err(e) => Err(e),
                    }
                })
            }),
        ));
    }

    /// Deletes newest first, each gone before the next: a ClusterSet goes before its token
    /// Secret, so the member controller still holds the token when it leaves the leader.
    async fn run(self, client: &Client) {
        for (label, delete) in self.0.into_iter().rev() {
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut first = true;
            loop {
                // Deleting again answers 404 once the object is really gone.
                match delete(client.clone()).await {
                    Err(e) => {
                        eprintln!("  could not delete {label}: {e}; delete it by hand");
                        break;
                    }
                    Ok(true) => {
                        eprintln!("  rolled back: deleted {label}");
                        break;
                    }
                    Ok(false) if Instant::now() > deadline => {
                        eprintln!("  {label} is still being deleted");
                        break;
                    }
                    Ok(false) => {
                        if first && label.starts_with("ClusterSet") {
                            // Give the member controller the moment it needs to leave.
                            tokio::time::sleep(Duration::from_secs(2)).await;
                        }
                        first = false;
                        tokio::time::sleep(Duration::from_millis(300)).await;
                    }
                }
            }
        }
    }
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

async fn init(c: &Cluster, a: InitArgs) -> anyhow::Result<()> {
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

fn pick(flag: Option<String>, file: &str, what: &str, hint: &str) -> anyhow::Result<String> {
    match flag {
        Some(v) if !v.is_empty() => Ok(v),
        _ if !file.is_empty() => Ok(file.to_owned()),
        _ => bail!("{what} is missing: pass {hint} or a join config with -f"),
    }
}

async fn join(c: &Cluster, a: JoinArgs) -> anyhow::Result<()> {
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
    // The token Secret file: --token-secret-file, else the config's tokenSecretFile (relative
    // to the config file), else a Secret document inside the config.
    let config_file_token = (!file.token_secret_file.is_empty()).then(|| {
        let p = PathBuf::from(&file.token_secret_file);
        match a.config_file.as_ref().and_then(|c| c.parent()) {
            Some(dir) if p.is_relative() => dir.join(p),
            _ => p,
        }
    });
    let secret_doc = match (
        a.token_secret_file.as_ref().or(config_file_token.as_ref()),
        file_secret,
    ) {
        (Some(p), _) => {
            let text =
                std::fs::read_to_string(p).with_context(|| format!("reading {}", p.display()))?;
            Some(
                serde_yaml::from_str::<Value>(&text)
                    .with_context(|| format!("in {}", p.display()))?,
            )
        }
        (None, s) => s,
    };
    let secret_name = a
        .token_secret_name
        .or_else(|| (!file.token_secret_name.is_empty()).then(|| file.token_secret_name.clone()))
        .or_else(|| {
            secret_doc
                .as_ref()
                .and_then(|s| s["metadata"]["name"].as_str().map(str::to_owned))
        })
        .context("the token Secret is missing: pass --token-secret-file (from mcctl create membertoken -o) or --token-secret-name")?;

    let sets: Api<ClusterSet> = Api::namespaced(c.client.clone(), &ns);
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
        let secrets: Api<Secret> = Api::namespaced(c.client.clone(), &ns);
        match &secret_doc {
            Some(doc) => {
                let mut doc = doc.clone();
                if !doc.is_object() {
                    bail!("the token Secret file is not a Secret manifest (mcctl create membertoken -o writes one)");
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
                if secrets.get_opt(&secret_name).await?.is_some() {
                    bail!("Secret {ns}/{secret_name} already exists: delete it or pass --token-secret-name without a file to use it");
                }
                secrets
                    .create(&PostParams::default(), &s)
                    .await
                    .map_err(|e| explain(e, "creating the token Secret", &c.server))?;
                rollback.push::<Secret>(&ns, &secret_name);
                println!("Secret {ns}/{secret_name} created");
            }
            None => {
                if secrets.get_opt(&secret_name).await?.is_none() {
                    bail!("Secret {ns}/{secret_name} does not exist: pass --token-secret-file");
                }
            }
        }
        let set: ClusterSet = serde_json::from_value(json!({
            "apiVersion": "multicluster.crd.antrea.io/v1alpha2",
            "kind": "ClusterSet",
            "metadata": {"name": clusterset, "namespace": ns},
            "spec": {"clusterID": cluster_id, "namespace": leader_ns,
                     "leaders": [{"clusterID": leader_id, "server": server, "secret": secret_name}]},
        }))?;
        create_clusterset(&sets, &set, &c.server).await?;
        rollback.push::<ClusterSet>(&ns, &clusterset);
        println!("ClusterSet {ns}/{clusterset} created; waiting up to {} s for the leader {leader_id} at {server}", a.timeout);
        let deadline = Instant::now() + Duration::from_secs(a.timeout);
        let mut last = String::from("no status yet (is the member controller running in this namespace?)");
        loop {
            if let Some(s) = sets.get_opt(&clusterset).await? {
                let leader = s.status.as_ref().and_then(|st| {
                    st.cluster_statuses
                        .iter()
                        .find(|cs| cs.cluster_id.as_deref() == Some(&leader_id))
                });
                if let Some(ready) = leader.and_then(|l| {
                    l.conditions.iter().find(|c| c.type_.as_deref() == Some("Ready"))
                }) {
                    if ready.status.as_deref() == Some("True") {
                        println!("joined: the leader {leader_id} accepted {cluster_id} in ClusterSet {clusterset}");
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
                bail!("the leader did not accept this cluster within {} s; last status: {last}", a.timeout);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
    .await;
    if let Err(e) = result {
        eprintln!("Failed to join the ClusterSet: {e:#}. Deleting the created resources");
        rollback.run(&c.client).await;
        bail!("join failed: {e:#}");
    }
    Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_unreachable_webhook_is_retried() {
        let api = |code: u16, message: &str| {
            kube::Error::Api(
                serde_json::from_value(json!({
                    "status": "Failure", "message": message, "reason": "InternalError", "code": code
                }))
                .unwrap(),
            )
        };
        assert!(webhook_unreachable(&api(
            500,
            "Internal error occurred: failed calling webhook \"vclusterset.strait.multicluster.antrea.io\": failed to call webhook: Post \"https://antrea-mc-webhook-service.kube-system.svc:443/validate\": dial tcp 10.244.2.2:9443: connect: connection refused"
        )));
        assert!(webhook_unreachable(&api(
            500,
            "Internal error occurred: failed calling webhook \"v\": failed to call webhook: no endpoints available for service \"antrea-mc-webhook-service\""
        )));
        // The webhook's own answer, and other failures, are final.
        assert!(!webhook_unreachable(&api(
            403,
            "admission webhook \"v\" denied the request: one ClusterSet per namespace"
        )));
        assert!(!webhook_unreachable(&api(500, "connection refused")));
    }

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
