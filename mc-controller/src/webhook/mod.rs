//! The admission webhooks (docs/design.md §3): an HTTPS server with a self-managed CA (`tls`), the
//! rules as pure functions (`rules`), and here the glue: read the facts a rule needs from the API,
//! apply the rule, answer the API server. The webhooks change no state: the leader loop records a
//! ServiceAccount's binding (`leader::binding`).
//!
//! Paths (the same as Antrea's):
//! - leader and member: `/validate-multicluster-crd-antrea-io-v1alpha2-clusterset`
//! - leader: `/validate-multicluster-crd-antrea-io-v1alpha1-memberclusterannounce`,
//!   `/validate-multicluster-crd-antrea-io-v1alpha1-resourceexport`,
//!   `/mutate-multicluster-crd-antrea-io-v1alpha1-resourceexport`
//! - member: `/validate-multicluster-crd-antrea-io-v1alpha1-gateway`

pub mod rules;
pub mod tls;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use anyhow::Context as _;
use axum::{
    Json, Router,
    extract::{DefaultBodyLimit, State},
    http::StatusCode,
    middleware::{self, Next},
    response::{IntoResponse as _, Response},
    routing::post,
};
use k8s_openapi::api::{
    admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration, WebhookClientConfig,
    },
    authentication::v1::SelfSubjectReview,
    core::v1::{ConfigMap, Secret, ServiceAccount},
};
use kube::{
    Api, Client, ResourceExt as _,
    api::{ListParams, Patch, PatchParams, PostParams},
    core::{
        DynamicObject,
        admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation},
    },
};
use mc_api::{
    clusterset::v1alpha2::ClusterSet, exports::ResourceExport, gateway::Gateway,
    memberclusterannounce::MemberClusterAnnounce, names::annotations,
};
use serde::de::DeserializeOwned;
use serde_json::json;

use mc_kube::{Metrics, Watched, write::MANAGER};
use rules::{Account, AnnounceFacts, Caller, Op, Verdict};

pub const SERVICE_NAME: &str = "antrea-mc-webhook-service";

/// What the webhook server takes from its clients ([`Limits::DEPLOYED`]).
#[derive(Clone, Copy, Debug)]
struct Limits {
    /// The largest request body (an AdmissionReview) accepted: 413 beyond.
    body_bytes: usize,
    /// A request must be read and answered within this: 408 after.
    request: Duration,
    /// A connection must send its request head within this (TLS handshake: the same).
    header: Duration,
    /// Connections served at once; more are closed at once.
    connections: usize,
    /// How long one connection may be kept (its requests keep coming).
    connection_age: Duration,
}

impl Limits {
    const DEPLOYED: Limits = Limits {
        // An object (etcd keeps at most 1.5 MiB) and its old version, encoded.
        body_bytes: 4 << 20,
        // The API server gives a webhook 10 s.
        request: Duration::from_secs(10),
        header: Duration::from_secs(10),
        connections: 256,
        connection_age: Duration::from_secs(300),
    };
}
pub const CA_CONFIGMAP: &str = "antrea-mc-ca";
/// Labels that select the webhook configurations a controller keeps the CA of.
pub const LABEL_SERVED_BY: (&str, &str) = ("served-by", "antrea-mc-controller");
pub const LABEL_ROLE: &str = "role";
/// Optional: when present, only the controller of this namespace serves the configuration.
pub const LABEL_SERVED_IN: &str = "served-in";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Leader,
    Member,
}

impl Role {
    fn label(self) -> &'static str {
        match self {
            Role::Leader => "leader",
            Role::Member => "member",
        }
    }
}

pub struct WebhookOptions {
    pub role: Role,
    pub namespace: String,
    /// Where to listen, e.g. `0.0.0.0:9443`.
    pub addr: String,
    /// Extra names and addresses for the serving certificate (beyond the Service's DNS names).
    pub hosts: Vec<String>,
    /// Leader: the namespace's ServiceAccounts, watched by the leader loop (callers are looked
    /// up there rather than with a GET per request).
    pub accounts: Option<Arc<Watched<ServiceAccount>>>,
}

/// The Secret that holds the webhooks' CA, shared by every instance of the controller.
pub const CA_SECRET: &str = "antrea-mc-webhook-ca";

/// The CA from Secret `antrea-mc-webhook-ca`, made and stored when there is none (or it has less
/// than a year left). Instances starting together agree: the first write wins, the others read it.
async fn load_ca(client: &Client, ns: &str) -> anyhow::Result<tls::Authority> {
    let api: Api<Secret> = Api::namespaced(client.clone(), ns);
    let field = |s: &Secret, k: &str| {
        s.data
            .as_ref()
            .and_then(|d| d.get(k))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
    };
    for _ in 0..5 {
        let existing = api
            .get_opt(CA_SECRET)
            .await
            .with_context(|| format!("reading Secret {ns}/{CA_SECRET}"))?;
        if let Some(s) = &existing
            && let (Some(crt), Some(key), Some(until)) = (
                field(s, "ca.crt"),
                field(s, "ca.key"),
                field(s, "ca.expiry"),
            )
            && let Some(ca) = until
                .trim()
                .parse()
                .ok()
                .and_then(|until| tls::Authority::load(ns, &crt, &key, until))
        {
            tracing::info!(secret = CA_SECRET, "reusing the webhook CA");
            return Ok(ca);
        }
        let ca = tls::Authority::generate(ns)?;
        // A core object built from its JSON: no contract type involved.
        let mut secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": CA_SECRET, "namespace": ns},
            "type": "Opaque",
            "stringData": {"ca.crt": ca.pem, "ca.key": ca.key_pem(), "ca.expiry": ca.not_after.to_string()},
        }))?;
        let written = match existing {
            None => api.create(&PostParams::default(), &secret).await,
            Some(old) => {
                secret.metadata.resource_version = old.metadata.resource_version.clone();
                api.replace(CA_SECRET, &PostParams::default(), &secret)
                    .await
            }
        };
        match written {
            Ok(_) => {
                tracing::info!(secret = CA_SECRET, "made a new webhook CA");
                return Ok(ca);
            }
            // Another instance wrote it first: read theirs.
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => {
                return Err(e).with_context(|| format!("writing Secret {ns}/{CA_SECRET}"));
            }
        }
    }
    anyhow::bail!("Secret {ns}/{CA_SECRET} keeps changing under this controller")
}

struct Ctx {
    client: Client,
    ns: String,
    own_username: String,
    metrics: Metrics,
    /// The leader namespace's ServiceAccounts (leader role): the callers of the busiest webhook.
    accounts: Option<Arc<Watched<ServiceAccount>>>,
}

/// Prepares the webhooks — CA, serving certificate, listener, CA published — and returns the
/// future that serves them (and keeps the published CA right).
pub async fn start(
    client: Client,
    opts: WebhookOptions,
    metrics: Metrics,
) -> anyhow::Result<impl Future<Output = anyhow::Result<()>>> {
    let review = Api::<SelfSubjectReview>::all(client.clone());
    let (pp, ssr) = (PostParams::default(), SelfSubjectReview::default());
    let review = review.create(&pp, &ssr);
    // Deployed, the controller runs as ServiceAccount antrea-mc-controller of its namespace:
    // that is the fallback when the API cannot tell (SelfSubjectReview needs Kubernetes 1.28).
    let fallback = format!(
        "system:serviceaccount:{}:antrea-mc-controller",
        opts.namespace
    );
    let own_username = match tokio::time::timeout(Duration::from_secs(10), review).await {
        Ok(Ok(r)) => r.status.and_then(|s| s.user_info).and_then(|u| u.username),
        Err(_) => {
            tracing::warn!(fallback, "SelfSubjectReview timed out; assuming this controller's identity");
            None
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, fallback, "SelfSubjectReview failed; assuming this controller's identity");
            None
        }
    }
    .unwrap_or(fallback);
    tracing::info!(
        identity = own_username,
        "webhooks: this controller's identity"
    );
    let authority = Arc::new(load_ca(&client, &opts.namespace).await?);
    let mut hosts = vec![
        format!("{SERVICE_NAME}.{}.svc", opts.namespace),
        format!("{SERVICE_NAME}.{}.svc.cluster.local", opts.namespace),
    ];
    hosts.extend(opts.hosts.iter().cloned());
    let serving = authority.issue(&hosts)?;
    let resolver = tls::Resolver::new(&serving);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls::server_config(resolver.clone())?));
    let addr = normalize_addr(&opts.addr);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr} for the admission webhooks"))?;
    tracing::info!(
        addr,
        role = opts.role.label(),
        "admission webhooks listening"
    );

    let ctx = Arc::new(Ctx {
        client: client.clone(),
        ns: opts.namespace.clone(),
        own_username,
        metrics: metrics.clone(),
        accounts: opts.accounts.clone(),
    });
    const CLUSTERSET_PATH: &str = "/validate-multicluster-crd-antrea-io-v1alpha2-clusterset";
    let app = match opts.role {
        Role::Leader => Router::new()
            .route(CLUSTERSET_PATH, post(validate_clusterset_leader))
            .route(
                "/validate-multicluster-crd-antrea-io-v1alpha1-memberclusterannounce",
                post(validate_announce),
            )
            .route(
                "/validate-multicluster-crd-antrea-io-v1alpha1-resourceexport",
                post(validate_export),
            )
            .route(
                "/mutate-multicluster-crd-antrea-io-v1alpha1-resourceexport",
                post(mutate_export),
            )
            .route(
                "/mutate-multicluster-crd-antrea-io-v1alpha1-memberclusterannounce",
                post(mutate_announce),
            ),
        Role::Member => Router::new()
            .route(CLUSTERSET_PATH, post(validate_clusterset_member))
            .route(
                "/validate-multicluster-crd-antrea-io-v1alpha1-gateway",
                post(validate_gateway),
            ),
    };
    let app = bounded(app, Limits::DEPLOYED).with_state(ctx);

    let publisher = Publisher {
        client,
        role: opts.role,
        ns: opts.namespace,
        ca: authority.pem.clone(),
    };
    // The first publication before serving, so that the API server trusts us from the start;
    // then every 30 s (a configuration applied later, or overwritten, gets the CA). A failure
    // is logged when it first happens and when it changes, not every time.
    let mut last = report(None, publisher.publish().await);
    let serve = async move {
        tokio::spawn(tls::renew(authority, hosts, resolver, serving.not_after));
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(30)).await;
                last = report(last, publisher.publish().await);
            }
        });
        serve(listener, acceptor, app, Limits::DEPLOYED).await
    };
    Ok(serve)
}

/// `app` with the body limit and the request deadline of `limits`.
fn bounded<S: Clone + Send + Sync + 'static>(app: Router<S>, limits: Limits) -> Router<S> {
    app.layer(DefaultBodyLimit::max(limits.body_bytes))
        .layer(middleware::from_fn_with_state(limits.request, deadline))
}

/// Accepts TLS connections on `listener` and serves `app` on each, at most
/// `limits.connections` at once.
async fn serve(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    app: Router,
    limits: Limits,
) -> anyhow::Result<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.connections));
    loop {
        let (tcp, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "webhook accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Full: closed at once (the client retries), so that the listener keeps draining its
        // backlog and the API server's own connections get the next free slot.
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            let served = limits.connections;
            tracing::debug!(%peer, "webhook connection refused: {served} served already");
            continue;
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            connection(acceptor, app, tcp, peer, limits).await;
            drop(slot);
        });
    }
}

/// Answers 408 when a request is not read and answered within `timeout` (a client sending its
/// body slowly holds a connection slot no longer).
async fn deadline(
    State(timeout): State<Duration>,
    request: axum::extract::Request,
    next: Next,
) -> Response {
    match tokio::time::timeout(timeout, next.run(request)).await {
        Ok(response) => response,
        Err(_) => (StatusCode::REQUEST_TIMEOUT, "request not completed in time").into_response(),
    }
}

fn report(last: Option<String>, result: anyhow::Result<()>) -> Option<String> {
    match result {
        Ok(()) => {
            if last.is_some() {
                tracing::info!("the webhook CA is published");
            }
            None
        }
        Err(e) => {
            let message = format!("{e:#}");
            if last.as_ref() != Some(&message) {
                tracing::warn!(
                    error = message,
                    "publishing the webhook CA failed; retrying every 30 s"
                );
            }
            Some(message)
        }
    }
}

fn normalize_addr(addr: &str) -> String {
    if addr.starts_with(':') {
        format!("0.0.0.0{addr}")
    } else {
        addr.to_owned()
    }
}

async fn connection(
    acceptor: tokio_rustls::TlsAcceptor,
    app: Router,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    limits: Limits,
) {
    let tls = match tokio::time::timeout(limits.header, acceptor.accept(tcp)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "webhook TLS handshake failed");
            return;
        }
        Err(_) => return,
    };
    let svc = hyper_util::service::TowerToHyperService::new(app);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header);
    let conn = builder.serve_connection(hyper_util::rt::TokioIo::new(tls), svc);
    tokio::pin!(conn);
    // A connection holds its slot for a bounded time: past it, the request in flight is
    // answered and the connection closed (the API server opens another).
    let served = tokio::select! {
        served = conn.as_mut() => served,
        () = tokio::time::sleep(limits.connection_age) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = served {
        tracing::debug!(%peer, error = %e, "webhook connection ended");
    }
}

/// Keeps ConfigMap `antrea-mc-ca` and the caBundle of this controller's webhook configurations
/// equal to the CA.
struct Publisher {
    client: Client,
    role: Role,
    ns: String,
    ca: String,
}

impl Publisher {
    async fn publish(&self) -> anyhow::Result<()> {
        let cms: Api<ConfigMap> = Api::namespaced(self.client.clone(), &self.ns);
        // A core object built from its JSON: no contract type involved.
        let cm = json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": CA_CONFIGMAP, "namespace": self.ns},
            "data": {"ca.crt": self.ca},
        });
        cms.patch(
            CA_CONFIGMAP,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(cm),
        )
        .await
        .with_context(|| format!("writing ConfigMap {}/{CA_CONFIGMAP}", self.ns))?;
        let selector = format!(
            "{}={},{LABEL_ROLE}={}",
            LABEL_SERVED_BY.0,
            LABEL_SERVED_BY.1,
            self.role.label()
        );
        let bundle = k8s_openapi::ByteString(self.ca.as_bytes().to_vec());
        let lp = ListParams::default().labels(&selector);
        let mut found = self
            .publish_into(
                Api::<ValidatingWebhookConfiguration>::all(self.client.clone()),
                &lp,
                &bundle,
                |c| {
                    c.webhooks
                        .iter_mut()
                        .flatten()
                        .map(|w| &mut w.client_config)
                        .collect()
                },
            )
            .await?;
        // Only the leader has a mutating webhook (and only its RBAC lists them).
        if self.role == Role::Leader {
            found += self
                .publish_into(
                    Api::<MutatingWebhookConfiguration>::all(self.client.clone()),
                    &lp,
                    &bundle,
                    |c| {
                        c.webhooks
                            .iter_mut()
                            .flatten()
                            .map(|w| &mut w.client_config)
                            .collect()
                    },
                )
                .await?;
        }
        if found == 0 {
            anyhow::bail!(
                "no webhook configuration is labelled {selector}: the identity-binding rules are not enforced until deploy/{}/webhooks.yaml is applied",
                self.role.label()
            );
        }
        Ok(())
    }

    /// Puts the CA into every webhook of the configurations of one kind that are ours; returns
    /// how many configurations are ours.
    async fn publish_into<K>(
        &self,
        api: Api<K>,
        lp: &ListParams,
        bundle: &k8s_openapi::ByteString,
        configs: impl Fn(&mut K) -> Vec<&mut WebhookClientConfig>,
    ) -> anyhow::Result<usize>
    where
        K: kube::Resource<DynamicType = ()>
            + Clone
            + serde::de::DeserializeOwned
            + serde::Serialize
            + std::fmt::Debug,
    {
        let kind = K::kind(&());
        let mut found = 0;
        for mut c in api
            .list(lp)
            .await
            .with_context(|| format!("listing {kind}s"))?
        {
            if !self.ours(c.labels()) {
                continue;
            }
            found += 1;
            let mut changed = false;
            for cc in configs(&mut c) {
                if cc.ca_bundle.as_ref() != Some(bundle) {
                    cc.ca_bundle = Some(bundle.clone());
                    changed = true;
                }
            }
            if changed {
                let name = c.name_any();
                c.meta_mut().managed_fields = None;
                api.replace(&name, &PostParams::default(), &c)
                    .await
                    .with_context(|| format!("updating {kind} {name}"))?;
                tracing::info!(name, "published the webhook CA");
            }
        }
        Ok(found)
    }

    fn ours(&self, labels: &std::collections::BTreeMap<String, String>) -> bool {
        labels.get(LABEL_SERVED_IN).is_none_or(|ns| *ns == self.ns)
    }
}

// ---------------------------------------------------------------------------------------------
// Handlers

type Review = Json<AdmissionReview<DynamicObject>>;

struct Request {
    req: AdmissionRequest<DynamicObject>,
    op: Op,
    caller: Caller,
}

/// The request's stored (`old`) and new object, read as `K`.
type Objects<K> = (Option<K>, Option<K>);

impl Request {
    /// The request's objects read as the rules read them. A request whose object cannot be read
    /// (a field of an open schema with the wrong shape, say) is refused, naming why; only an
    /// administrator or this controller may still delete a stored one that cannot be read (it
    /// reads as absent), so that it can be removed.
    fn objects<K: DeserializeOwned>(&self, kind: &str) -> Result<Objects<K>, Verdict> {
        let trusted =
            matches!(self.caller, Caller::Admin | Caller::Controller) && self.op == Op::Delete;
        let read = |o: &Option<DynamicObject>, which: &str| -> Result<Option<K>, Verdict> {
            let Some(o) = o else { return Ok(None) };
            match serde_json::to_value(o).and_then(serde_json::from_value::<K>) {
                Ok(k) => Ok(Some(k)),
                Err(_) if trusted => Ok(None),
                Err(e) => Err(Verdict::Deny(format!(
                    "the {which} {kind} cannot be read: {e}"
                ))),
            }
        };
        Ok((
            read(&self.req.old_object, "stored")?,
            read(&self.req.object, "new")?,
        ))
    }
}

fn unpack(ctx: &Ctx, review: AdmissionReview<DynamicObject>) -> Result<Request, Box<Review>> {
    let req: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(_) => {
            return Err(Box::new(Json(
                AdmissionResponse::invalid("the AdmissionReview carries no request").into_review(),
            )));
        }
    };
    let op = match req.operation {
        Operation::Create => Op::Create,
        Operation::Update => Op::Update,
        Operation::Delete => Op::Delete,
        Operation::Connect => {
            return Err(Box::new(Json(AdmissionResponse::from(&req).into_review())));
        }
    };
    let caller = Caller::classify(
        req.user_info.username.as_deref().unwrap_or(""),
        req.user_info.groups.as_deref().unwrap_or(&[]),
        Some(&ctx.own_username),
    );
    Ok(Request { op, caller, req })
}

fn answer(ctx: &Ctx, webhook: &str, r: &Request, verdict: Result<Verdict, String>) -> Review {
    let resp = AdmissionResponse::from(&r.req);
    let (resp, outcome) = match verdict {
        Ok(Verdict::Allow) => (resp, "allowed"),
        Ok(Verdict::Deny(message)) => {
            tracing::info!(
                webhook,
                user = r.req.user_info.username.as_deref().unwrap_or(""),
                operation = ?r.req.operation,
                name = r.req.name,
                message,
                "admission denied"
            );
            let mut resp = resp.deny(message);
            resp.result.code = 403;
            resp.result.reason = "Forbidden".into();
            (resp, "denied")
        }
        Err(message) => {
            // The facts could not be read: refuse rather than guess (failurePolicy is Fail too).
            tracing::warn!(webhook, message, "admission failed");
            let mut resp = resp.deny(format!("{message}; retry"));
            resp.result.code = 500;
            (resp, "error")
        }
    };
    ctx.metrics.inc(
        "strait_mc_webhook_requests_total",
        &[("webhook", webhook), ("outcome", outcome)],
    );
    Json(resp.into_review())
}

fn err(what: &str, e: kube::Error) -> String {
    format!("the webhook could not read {what}: {e}")
}

async fn clusterset_facts(ctx: &Ctx, r: &Request, leader: bool) -> Result<Verdict, String> {
    let sets: Api<ClusterSet> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let others: Vec<String> = sets
        .list_metadata(&ListParams::default())
        .await
        .map_err(|e| err("the ClusterSets", e))?
        .into_iter()
        .map(|m| m.name_any())
        .filter(|n| *n != r.req.name)
        .collect();
    let announces = if leader && r.op == Op::Delete {
        let mcas: Api<MemberClusterAnnounce> = Api::namespaced(ctx.client.clone(), &ctx.ns);
        mcas.list_metadata(&ListParams::default())
            .await
            .map_err(|e| err("the MemberClusterAnnounces", e))?
            .items
            .len()
    } else {
        0
    };
    let (old, new) = match r.objects::<ClusterSet>("ClusterSet") {
        Ok(objects) => objects,
        Err(refused) => return Ok(refused),
    };
    Ok(rules::clusterset(
        r.op,
        old.as_ref(),
        new.as_ref(),
        &others,
        announces,
    ))
}

async fn validate_clusterset_leader(State(ctx): State<Arc<Ctx>>, Json(review): Review) -> Review {
    let r = match unpack(&ctx, review) {
        Ok(r) => r,
        Err(done) => return *done,
    };
    let v = clusterset_facts(&ctx, &r, true).await;
    answer(&ctx, "clusterset", &r, v)
}

async fn validate_clusterset_member(State(ctx): State<Arc<Ctx>>, Json(review): Review) -> Review {
    let r = match unpack(&ctx, review) {
        Ok(r) => r,
        Err(done) => return *done,
    };
    let v = clusterset_facts(&ctx, &r, false).await;
    answer(&ctx, "clusterset", &r, v)
}

/// The caller's ServiceAccount in the controller's namespace; `Account::default()` (not found)
/// for any other caller.
async fn account(ctx: &Ctx, r: &Request) -> Result<(Account, Option<ServiceAccount>), String> {
    let Caller::ServiceAccount { namespace, name } = &r.caller else {
        return Ok((Account::default(), None));
    };
    if *namespace != ctx.ns {
        return Ok((Account::default(), None));
    }
    // A bound ServiceAccount from the watch, if it is the very one the token belongs to (the
    // token's UID is the ServiceAccount's: one deleted and re-created under the same name is
    // another). Anything else (not yet seen, not yet bound, re-created) is read from the API, so
    // a binding just made is never missed and a stale one never trusted.
    let token_uid = r.req.user_info.uid.as_deref().filter(|u| !u.is_empty());
    let cached = ctx
        .accounts
        .as_ref()
        .filter(|w| w.ready())
        .and_then(|w| w.get(Some(&ctx.ns), name))
        .filter(|sa| sa.annotations().contains_key(annotations::CLUSTER_ID))
        .filter(|sa| token_uid.is_some() && sa.metadata.uid.as_deref() == token_uid);
    let sa = match cached {
        Some(sa) => Some(sa.as_ref().clone()),
        None => {
            let api: Api<ServiceAccount> = Api::namespaced(ctx.client.clone(), &ctx.ns);
            api.get_opt(name)
                .await
                .map_err(|e| err(&format!("ServiceAccount {namespace}/{name}"), e))?
        }
    };
    Ok((
        Account {
            found: sa.is_some(),
            cluster_id: sa
                .as_ref()
                .and_then(|s| s.annotations().get(annotations::CLUSTER_ID).cloned()),
        },
        sa,
    ))
}

/// The namespace's ClusterSet (the oldest) for a new announce: its name and leader's ID.
async fn announce_clusterset(ctx: &Ctx) -> Result<Option<(String, String)>, String> {
    let sets: Api<ClusterSet> = Api::namespaced(ctx.client.clone(), &ctx.ns);
    let mut sets = sets
        .list(&ListParams::default())
        .await
        .map_err(|e| err("the ClusterSets", e))?
        .items;
    mc_api::clusterset::oldest_first(&mut sets);
    Ok(sets.first().map(|s| {
        (
            s.name_any(),
            s.spec
                .leaders
                .first()
                .and_then(|l| l.cluster_id.clone())
                .unwrap_or_default(),
        )
    }))
}

async fn announce_verdict(ctx: &Ctx, r: &Request) -> Result<Verdict, String> {
    let (old, new) = match r.objects::<MemberClusterAnnounce>("MemberClusterAnnounce") {
        Ok(objects) => objects,
        Err(refused) => return Ok(refused),
    };
    let (account, sa) = account(ctx, r).await?;
    // The rules read the ClusterSet only for a new announce, and the other ServiceAccounts'
    // bindings only for a new announce or a caller not bound yet: a bound member's heartbeat
    // (an update every 10 s from every member) lists neither, or each beat would cost the API
    // server a list of every member's ServiceAccount (K² objects per heartbeat interval; the
    // scale bench).
    let clusterset = if r.op == Op::Create {
        announce_clusterset(ctx).await?
    } else {
        None
    };
    let bound = if r.op == Op::Create || account.cluster_id.is_none() {
        let me = sa.as_ref().map(|s| s.name_any());
        Api::<ServiceAccount>::namespaced(ctx.client.clone(), &ctx.ns)
            .list_metadata(&ListParams::default())
            .await
            .map_err(|e| err("the ServiceAccounts", e))?
            .into_iter()
            .filter(|m| Some(m.name_any()) != me)
            .filter_map(|m| {
                let id = m.annotations().get(annotations::CLUSTER_ID)?.clone();
                (!id.is_empty()).then(|| (m.name_any(), id))
            })
            .collect()
    } else {
        Default::default()
    };
    let facts = AnnounceFacts {
        leader_ns: &ctx.ns,
        account,
        clusterset,
        bound,
    };
    Ok(rules::member_announce(
        r.op,
        &r.caller,
        old.as_ref(),
        new.as_ref(),
        &facts,
    ))
}

async fn validate_announce(State(ctx): State<Arc<Ctx>>, Json(review): Review) -> Review {
    let r = match unpack(&ctx, review) {
        Ok(r) => r,
        Err(done) => return *done,
    };
    let v = announce_verdict(&ctx, &r).await;
    answer(&ctx, "memberclusterannounce", &r, v)
}

async fn validate_export(State(ctx): State<Arc<Ctx>>, Json(review): Review) -> Review {
    let r = match unpack(&ctx, review) {
        Ok(r) => r,
        Err(done) => return *done,
    };
    let v = match r.objects::<ResourceExport>("ResourceExport") {
        Ok((old, new)) => account(&ctx, &r).await.map(|(account, _)| {
            rules::resource_export(
                r.op,
                &r.caller,
                &ctx.ns,
                &account,
                old.as_ref(),
                new.as_ref(),
            )
        }),
        Err(refused) => Ok(refused),
    };
    answer(&ctx, "resourceexport", &r, v)
}

async fn mutate_announce(State(ctx): State<Arc<Ctx>>, Json(review): Review) -> Review {
    let r = match unpack(&ctx, review) {
        Ok(r) => r,
        Err(done) => return *done,
    };
    // An object that cannot be read is not changed here; validation refuses it.
    let new = r
        .objects::<MemberClusterAnnounce>("MemberClusterAnnounce")
        .ok()
        .and_then(|(_, new)| new);
    let ops = match (&r.op, &new) {
        (Op::Create, Some(new)) => rules::stamp_announce(&r.caller, &ctx.ns, new),
        _ => Vec::new(),
    };
    patch_answer(&ctx, "mutate-memberclusterannounce", &r, ops)
}

/// The answer of a mutating webhook: the JSON-patch operations, if any.
fn patch_answer(
    ctx: &Ctx,
    webhook: &str,
    r: &Request,
    ops: Vec<json_patch::PatchOperation>,
) -> Review {
    let resp = AdmissionResponse::from(&r.req);
    if ops.is_empty() {
        return Json(resp.into_review());
    }
    let patch = resp
        .clone()
        .with_patch(json_patch::Patch(ops))
        .map_err(|e| e.to_string());
    match patch {
        Ok(resp) => Json(resp.into_review()),
        Err(e) => answer(ctx, webhook, r, Err(e)),
    }
}

async fn mutate_export(State(ctx): State<Arc<Ctx>>, Json(review): Review) -> Review {
    let r = match unpack(&ctx, review) {
        Ok(r) => r,
        Err(done) => return *done,
    };
    // An object that cannot be read is not changed here; validation refuses it.
    let ops = r
        .objects::<ResourceExport>("ResourceExport")
        .ok()
        .and_then(|(_, new)| new)
        .map(|re| rules::mutate_resource_export(&re))
        .unwrap_or_default();
    patch_answer(&ctx, "mutate-resourceexport", &r, ops)
}

async fn validate_gateway(State(ctx): State<Arc<Ctx>>, Json(review): Review) -> Review {
    let r = match unpack(&ctx, review) {
        Ok(r) => r,
        Err(done) => return *done,
    };
    let node = r
        .req
        .user_info
        .extra
        .as_ref()
        .and_then(|e| e.get(rules::NODE_NAME_EXTRA))
        .and_then(|v| v.first())
        .map(String::as_str);
    let v = match r.objects::<Gateway>("Gateway") {
        Ok((old, new)) => rules::gateway(&r.caller, r.op, old.as_ref(), new.as_ref(), node),
        Err(refused) => refused,
    };
    answer(&ctx, "gateway", &r, Ok(v))
}

/// The server's limits on its clients, against a real TLS listener on loopback (with short
/// timeouts): an oversize body gets 413, a body that stops coming 408, a silent connection is
/// closed, and connections beyond the bound are closed at once while the served ones go on.
#[cfg(test)]
mod limits_tests {
    use std::time::Instant;

    use rustls::pki_types::{CertificateDer, ServerName, pem::PemObject as _};
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    const LIMITS: Limits = Limits {
        body_bytes: 64 << 10,
        request: Duration::from_secs(1),
        // Long enough that a served connection is not closed as idle while the test waits
        // for another on a loaded machine.
        header: Duration::from_secs(2),
        connections: 2,
        connection_age: Duration::from_secs(60),
    };

    type Conn = tokio_rustls::client::TlsStream<tokio::net::TcpStream>;

    /// A TLS connection to the server at `addr`, trusting `ca`.
    async fn dial(addr: SocketAddr, ca: &str) -> std::io::Result<Conn> {
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca.as_bytes()).expect("CA PEM"))
            .expect("CA");
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        connector
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
    }

    /// Sends a request head announcing `length` bytes of body, then `body`; the status the
    /// server answers with (0: it closed without answering).
    async fn request(conn: &mut Conn, length: usize, body: &[u8]) -> u16 {
        let head = format!(
            "POST /review HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {length}\r\n\r\n"
        );
        if conn.write_all(head.as_bytes()).await.is_err() || conn.write_all(body).await.is_err() {
            return 0;
        }
        let _ = conn.flush().await;
        // The whole response (head and `content-length` bytes of body), so that the
        // connection's next read starts at the next response.
        let mut got = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            let read = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await;
            let Ok(Ok(n)) = read else { return 0 };
            if n == 0 {
                return 0;
            }
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got).to_ascii_lowercase();
            let Some(end) = text.find("\r\n\r\n") else {
                continue;
            };
            let length = text
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse::<usize>().ok())
                .unwrap_or(0);
            if got.len() >= end + 4 + length {
                return text.get(9..12).and_then(|s| s.parse().ok()).unwrap_or(0);
            }
        }
    }

    /// Whether the server closed `conn` (a read gives end of file or an error in time).
    async fn closed(conn: &mut Conn) -> bool {
        let mut buf = [0u8; 16];
        matches!(
            tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf)).await,
            Ok(Ok(0) | Err(_))
        )
    }

    #[tokio::test]
    async fn the_webhook_server_bounds_bodies_time_and_connections() {
        let authority = tls::Authority::generate("test").expect("CA");
        let serving = authority.issue(&["localhost".to_owned()]).expect("cert");
        let config = tls::server_config(tls::Resolver::new(&serving)).expect("TLS");
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = bounded(
            Router::new().route(
                "/review",
                post(|body: axum::body::Bytes| async move { format!("{} bytes", body.len()) }),
            ),
            LIMITS,
        );
        let server = tokio::spawn(serve(listener, acceptor, app, LIMITS));
        let ca = authority.pem.clone();

        // Within the limits: answered.
        let mut a = dial(addr, &ca).await.expect("first connection");
        assert_eq!(request(&mut a, 2, b"{}").await, 200);
        // A body over the limit: 413.
        let big = vec![b' '; LIMITS.body_bytes + 1];
        let mut b = dial(addr, &ca).await.expect("second connection");
        assert_eq!(request(&mut b, big.len(), &big).await, 413);
        drop(b);
        // A body that stops coming: 408 once the request's time is up.
        let mut c = dial(addr, &ca).await.expect("a connection");
        let started = Instant::now();
        assert_eq!(request(&mut c, 100, b"{").await, 408);
        assert!(
            started.elapsed() >= LIMITS.request,
            "{:?}",
            started.elapsed()
        );
        drop(c);
        // A connection that sends nothing is closed after the head's time.
        let mut silent = dial(addr, &ca).await.expect("a connection");
        assert!(closed(&mut silent).await, "a silent connection kept open");
        drop(silent);

        // An idle connection is closed after the head's time too (`a`, since its request).
        assert!(closed(&mut a).await, "an idle connection kept open");
        drop(a);
        // Two served at once: a third is closed at once, the two go on.
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut first = dial(addr, &ca).await.expect("the first slot");
        let mut second = dial(addr, &ca).await.expect("the second slot");
        assert_eq!(request(&mut first, 2, b"{}").await, 200);
        assert_eq!(request(&mut second, 2, b"{}").await, 200);
        match dial(addr, &ca).await {
            Err(_) => {}
            Ok(mut third) => assert!(closed(&mut third).await, "a third connection was served"),
        }
        assert_eq!(
            request(&mut first, 2, b"{}").await,
            200,
            "a served one goes on"
        );
        server.abort();
    }
}
