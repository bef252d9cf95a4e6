//! Binds a member's ServiceAccount to the cluster ID of the announce it created (DESIGN §3).
//!
//! The guides create member ServiceAccounts without the `multicluster.antrea.io/cluster-id`
//! annotation. The mutating webhook stamps the creator of each new MemberClusterAnnounce
//! (`multicluster.antrea.io/announced-by`); here, from the stored announce, the leader records
//! the binding on the ServiceAccount, unless another ServiceAccount already holds that ID. From
//! then on the webhooks treat the ServiceAccount like one created annotated.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::{
    Api, Client, ResourceExt as _,
    api::{ListParams, Patch, PatchParams},
};
use mc_api::{memberclusterannounce::MemberClusterAnnounce, names::annotations};
use serde_json::json;

pub struct Binder {
    api: Api<ServiceAccount>,
    /// (ServiceAccount, cluster ID) pairs already settled, so a steady state costs no calls.
    done: HashSet<(String, String)>,
}

impl Binder {
    pub fn new(client: Client, ns: &str) -> Self {
        Self {
            api: Api::namespaced(client, ns),
            done: HashSet::new(),
        }
    }

    /// Binds the creators of `announces` that are not bound yet; returns the failures.
    pub async fn observe(&mut self, announces: &[std::sync::Arc<MemberClusterAnnounce>]) -> usize {
        let mut failures = 0;
        for a in announces {
            let (Some(sa), Some(id)) = (
                a.annotations().get(annotations::ANNOUNCED_BY),
                a.spec.cluster_id.as_ref().filter(|id| !id.is_empty()),
            ) else {
                continue;
            };
            if a.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let key = (sa.clone(), id.clone());
            if self.done.contains(&key) {
                continue;
            }
            match self.bind(sa, id).await {
                Ok(()) => {
                    self.done.insert(key);
                }
                Err(e) => {
                    failures += 1;
                    tracing::warn!(service_account = sa, cluster_id = id, error = %e, "binding a member ServiceAccount failed; retrying");
                }
            }
        }
        failures
    }

    async fn bind(&self, sa: &str, id: &str) -> kube::Result<()> {
        let Some(account) = self.api.get_opt(sa).await? else {
            return Ok(());
        };
        if let Some(bound) = account.annotations().get(annotations::CLUSTER_ID) {
            if bound != id {
                tracing::warn!(
                    service_account = sa,
                    bound,
                    announced = id,
                    "a member ServiceAccount announced a cluster ID it is not bound to"
                );
            }
            return Ok(());
        }
        let holders = self.api.list_metadata(&ListParams::default()).await?;
        if let Some(other) = holders.iter().find(|m| {
            m.name_any() != sa
                && m.annotations()
                    .get(annotations::CLUSTER_ID)
                    .map(String::as_str)
                    == Some(id)
        }) {
            tracing::warn!(
                service_account = sa,
                cluster_id = id,
                holder = other.name_any(),
                "not binding: another ServiceAccount holds this cluster ID"
            );
            return Ok(());
        }
        let patch = json!({"metadata": {
            "annotations": {annotations::CLUSTER_ID: id},
            "resourceVersion": account.resource_version(),
        }});
        self.api
            .patch(sa, &PatchParams::default(), &Patch::Merge(patch))
            .await?;
        tracing::info!(
            service_account = sa,
            cluster_id = id,
            "bound a member ServiceAccount to the cluster ID of the announce it created"
        );
        Ok(())
    }
}
