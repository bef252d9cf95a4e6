//! A member's connection to its leader: a client made from the ClusterSet and its token Secret,
//! the heartbeat (MemberClusterAnnounce `touch-ts`), and watches on the leader's ResourceImports
//! and on this member's own ResourceExports.

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use k8s_openapi::{ByteString, api::core::v1::Secret, jiff::Timestamp};
use kube::{
    Api, Client, Config, ResourceExt as _,
    api::{Patch, PatchParams, PostParams},
    config::{
        AuthInfo, Cluster, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster,
        NamedContext,
    },
    runtime::watcher,
};
use mc_api::{
    exports::ResourceExport,
    imports::ResourceImport,
    memberclusterannounce::{MemberClusterAnnounce, MemberClusterAnnounceFields},
    names::{self, annotations, labels},
};
use serde_json::json;

use mc_kube::{Trigger, Watched};

/// Everything a connection is made from; a change in any of it means a new connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    pub clusterset: String,
    pub cluster_id: String,
    pub leader_id: String,
    pub server: String,
    pub leader_ns: String,
    pub secret: String,
    pub token: String,
    pub ca: Vec<u8>,
}

/// The token Secret's contents, or what is wrong with it.
pub fn read_secret(secret: &Secret) -> Result<(String, Vec<u8>), String> {
    let data = secret.data.clone().unwrap_or_default();
    let get = |k: &str| {
        data.get(k)
            .map(|ByteString(b)| b.clone())
            .filter(|b| !b.is_empty())
    };
    let name = secret.name_any();
    let token = get("token").ok_or_else(|| format!("Secret {name} has no key \"token\""))?;
    let ca = get("ca.crt").ok_or_else(|| format!("Secret {name} has no key \"ca.crt\""))?;
    let token = String::from_utf8(token)
        .map_err(|_| format!("Secret {name}: \"token\" is not text"))?
        .trim()
        .to_owned();
    Ok((token, ca))
}

/// The heartbeat's view of the leader.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Beat {
    /// None until the first attempt.
    pub connected: Option<bool>,
    pub message: String,
    /// The announce exists in the leader and was updated by us.
    pub is_leader: bool,
}

pub struct Connection {
    pub identity: Identity,
    pub client: Client,
    pub imports: Watched<ResourceImport>,
    pub own_exports: Watched<ResourceExport>,
    pub beat: Arc<Mutex<Beat>>,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.heartbeat.abort();
    }
}

async fn client_for(id: &Identity) -> anyhow::Result<Client> {
    use base64::Engine as _;
    let kubeconfig = Kubeconfig {
        clusters: vec![NamedCluster {
            name: "leader".into(),
            cluster: Some(Cluster {
                server: Some(id.server.clone()),
                certificate_authority_data: Some(
                    base64::engine::general_purpose::STANDARD.encode(&id.ca),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: "member".into(),
            auth_info: Some(AuthInfo {
                token: Some(id.token.clone().into()),
                ..Default::default()
            }),
            ..Default::default()
        }],
        contexts: vec![NamedContext {
            name: "leader".into(),
            context: Some(Context {
                cluster: "leader".into(),
                user: Some("member".into()),
                namespace: Some(id.leader_ns.clone()),
                ..Default::default()
            }),
            ..Default::default()
        }],
        current_context: Some("leader".into()),
        ..Default::default()
    };
    let mut config =
        Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    // A leader gone without closing the connection is noticed as on the local client.
    mc_kube::with_read_timeout(&mut config);
    config.connect_timeout = Some(Duration::from_secs(5));
    Ok(Client::try_from(config)?)
}

fn describe(e: &kube::Error, id: &Identity) -> String {
    match e {
        kube::Error::Api(s) if s.code == 401 => format!(
            "the leader {} refused the token in Secret {} (401 Unauthorized): copy the member's token Secret from the leader again",
            id.server, id.secret
        ),
        kube::Error::Api(s) if s.message.contains("denied the request") => {
            format!("the leader {} refused it: {}", id.server, s.message)
        }
        kube::Error::Api(s) if s.code == 403 => format!(
            "the leader {} denied the request ({}): is the member's ServiceAccount bound to the Role antrea-mc-member-cluster-role in {}?",
            id.server, s.message, id.leader_ns
        ),
        kube::Error::Api(s) => format!("leader {}: {} ({})", id.server, s.message, s.code),
        other => format!("cannot reach the leader {}: {other}", id.server),
    }
}

/// What a member keeps of a ResourceImport: its embedded ServiceImport is read as
/// [`mc_api::imports::ImportedService`] (the spec and the exported labels and annotations; the
/// rest of an Antrea leader's object is not kept), and its name and namespace, which repeat the
/// import's own, are dropped.
fn trim_import(ri: &mut ResourceImport) {
    if let Some(Ok(si)) = ri.spec.service_import.as_mut().map(|si| &mut si.0) {
        si.metadata.name = None;
        si.metadata.namespace = None;
    }
}

impl Connection {
    pub async fn open(id: Identity, trigger: Trigger, interval: Duration) -> anyhow::Result<Self> {
        let client = client_for(&id).await?;
        let ns = id.leader_ns.clone();
        // Each marks the Service it is about (kinds that are not, on every pass).
        let imports = Watched::keyed(
            Api::namespaced(client.clone(), &ns),
            watcher::Config::default(),
            trigger.clone(),
            "leader ResourceImport",
            trim_import,
            |ri| Some(super::import_key(ri).into_iter().collect()),
        );
        let own_exports = Watched::keyed(
            Api::namespaced(client.clone(), &ns),
            watcher::Config::default().labels(&format!(
                "{}={}",
                labels::SOURCE_CLUSTER_ID,
                id.cluster_id
            )),
            trigger.clone(),
            "leader ResourceExport",
            |_| {},
            |re| Some(super::own_export_key(re).into_iter().collect()),
        );
        let beat = Arc::new(Mutex::new(Beat::default()));
        let heartbeat = tokio::spawn(heartbeat(
            Api::namespaced(client.clone(), &ns),
            id.clone(),
            beat.clone(),
            trigger,
            interval,
        ));
        tracing::info!(
            leader = id.server,
            namespace = ns,
            cluster = id.cluster_id,
            "connecting to the leader"
        );
        Ok(Self {
            identity: id,
            client,
            imports,
            own_exports,
            beat,
            heartbeat,
        })
    }

    pub fn beat(&self) -> Beat {
        self.beat.lock().expect("beat").clone()
    }

    /// Leaving the ClusterSet: remove our announce and our exports from the leader.
    pub async fn leave(&self) -> Result<(), String> {
        // Heartbeats stop first: a beat in flight would otherwise create the announce again
        // once it is deleted here.
        self.heartbeat.abort();
        while !self.heartbeat.is_finished() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let ns = &self.identity.leader_ns;
        let re: Api<ResourceExport> = Api::namespaced(self.client.clone(), ns);
        let lp = kube::api::ListParams::default().labels(&format!(
            "{}={}",
            labels::SOURCE_CLUSTER_ID,
            self.identity.cluster_id
        ));
        let dp = kube::api::DeleteParams::background();
        // One by one: the member Role grants delete, not deletecollection.
        let ours = re
            .list(&lp)
            .await
            .map_err(|e| describe(&e, &self.identity))?;
        for export in ours {
            match re.delete(&export.name_any(), &dp).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(describe(&e, &self.identity)),
            }
        }
        let mca: Api<MemberClusterAnnounce> = Api::namespaced(self.client.clone(), ns);
        match mca
            .delete(&names::member_announce(&self.identity.cluster_id), &dp)
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(describe(&e, &self.identity)),
        }
    }
}

async fn heartbeat(
    api: Api<MemberClusterAnnounce>,
    id: Identity,
    state: Arc<Mutex<Beat>>,
    trigger: Trigger,
    interval: Duration,
) {
    loop {
        let next = match beat_once(&api, &id).await {
            Ok(()) => Beat {
                connected: Some(true),
                message: String::new(),
                is_leader: true,
            },
            Err(e) => {
                let message = describe(&e, &id);
                tracing::warn!(error = message, "heartbeat failed");
                Beat {
                    connected: Some(false),
                    message,
                    is_leader: state.lock().expect("beat").is_leader,
                }
            }
        };
        let changed = {
            let mut s = state.lock().expect("beat");
            let changed = *s != next;
            *s = next;
            changed
        };
        if changed {
            trigger.fire();
        }
        tokio::time::sleep(interval).await;
    }
}

async fn beat_once(api: &Api<MemberClusterAnnounce>, id: &Identity) -> kube::Result<()> {
    let name = names::member_announce(&id.cluster_id);
    let now = Timestamp::now().to_string();
    let fields = MemberClusterAnnounceFields {
        cluster_id: Some(id.cluster_id.clone()),
        cluster_set_id: Some(id.clusterset.clone()),
        leader_cluster_id: Some(id.leader_id.clone()),
    };
    match api.get_opt(&name).await? {
        Some(existing) if existing.spec == fields => {
            // A merge-patch body: generic JSON by nature.
            let patch = json!({"metadata": {"annotations": {annotations::TOUCH_TS: now}}});
            api.patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await?;
        }
        existing => {
            if existing.is_some() {
                // An announce from an earlier ClusterSet: start again.
                api.delete(&name, &Default::default()).await?;
            }
            let mut mca = MemberClusterAnnounce::new(&name, fields);
            mca.annotations_mut()
                .insert(annotations::TOUCH_TS.into(), now);
            api.create(&PostParams::default(), &mca).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use mc_api::imports::ResourceImportSpec;
    use serde_json::json;

    use super::*;

    #[test]
    fn a_stored_import_keeps_the_embedded_spec_the_member_reads() {
        // As an Antrea leader writes it: a whole ServiceImport, status included.
        let si = json!({"apiVersion": "multicluster.x-k8s.io/v1alpha1", "kind": "ServiceImport",
            "metadata": {"name": "nginx", "namespace": "default", "labels": {"tier": "front"},
                "creationTimestamp": null},
            "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}], "type": "ClusterSetIP"},
            "status": {}});
        let mut ri: ResourceImport = serde_json::from_value(json!({
            "apiVersion": "multicluster.crd.antrea.io/v1alpha1", "kind": "ResourceImport",
            "metadata": {"name": "default-nginx-service"},
            "spec": {"kind": "ServiceImport", "name": "nginx", "namespace": "default",
                "serviceImport": si},
        }))
        .unwrap();
        trim_import(&mut ri);
        let kept = serde_json::to_value(ri.spec.service_import.as_ref().unwrap()).unwrap();
        assert_eq!(
            kept,
            json!({"metadata": {"labels": {"tier": "front"}}, "spec": si["spec"]})
        );
        let mut endpoints = ResourceImport::new(
            "default-nginx-endpoints",
            ResourceImportSpec {
                kind: Some("Endpoints".into()),
                endpoints: Some(Default::default()),
                ..Default::default()
            },
        );
        let before = endpoints.clone();
        trim_import(&mut endpoints);
        assert_eq!(endpoints.spec, before.spec);
    }
}
