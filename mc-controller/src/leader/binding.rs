//! Binds a member's ServiceAccount to the cluster ID of the announce it created
//! (docs/design.md §3).
//!
//! The guides create member ServiceAccounts without the `multicluster.antrea.io/cluster-id`
//! annotation. The mutating webhook stamps the creator of each new MemberClusterAnnounce
//! (`multicluster.antrea.io/announced-by`); here, from the stored announces and the watched
//! ServiceAccounts, the leader records the binding on the ServiceAccount, unless another
//! ServiceAccount already holds that ID. Level-triggered: a ServiceAccount deleted and created
//! again under the same name is bound again. From then on the webhooks treat the ServiceAccount
//! like one created annotated.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::ServiceAccount;
use kube::{
    Api, ResourceExt as _,
    api::{Patch, PatchParams},
};
use mc_api::{memberclusterannounce::MemberClusterAnnounce, names::annotations};
use serde_json::json;

/// The bindings to record: (ServiceAccount, its resourceVersion, cluster ID). Pure: what the
/// stored announces ask for that the ServiceAccounts do not have yet.
pub fn pending(
    announces: &[std::sync::Arc<MemberClusterAnnounce>],
    accounts: &[std::sync::Arc<ServiceAccount>],
) -> Vec<(String, String, String)> {
    // By name and by the cluster ID they hold, once: every pass (each member's heartbeat sets
    // one off) looks up every announce's ServiceAccount.
    let mut by_name: HashMap<&str, &ServiceAccount> = HashMap::new();
    let mut holders: HashMap<&str, &ServiceAccount> = HashMap::new();
    for account in accounts {
        if let Some(name) = account.metadata.name.as_deref() {
            by_name.insert(name, account);
        }
        if let Some(id) = account.annotations().get(annotations::CLUSTER_ID) {
            holders.entry(id.as_str()).or_insert(account);
        }
    }
    let held = |id: &str| holders.get(id).copied();
    let mut out = Vec::new();
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
        let Some(account) = by_name.get(sa.as_str()) else {
            continue;
        };
        if account.annotations().contains_key(annotations::CLUSTER_ID) {
            continue;
        }
        if let Some(holder) = held(id) {
            tracing::warn!(
                service_account = sa,
                cluster_id = id,
                holder = holder.name_any(),
                "not binding: another ServiceAccount holds this cluster ID"
            );
            continue;
        }
        out.push((
            sa.clone(),
            account.resource_version().unwrap_or_default(),
            id.clone(),
        ));
    }
    out
}

/// Records the pending bindings; returns the failures (retried on the next pass).
pub async fn bind(api: &Api<ServiceAccount>, pending: Vec<(String, String, String)>) -> usize {
    let mut failures = 0;
    for (sa, version, id) in pending {
        // A merge-patch body: generic JSON by nature.
        let patch = json!({"metadata": {
            "annotations": {annotations::CLUSTER_ID: id},
            "resourceVersion": version,
        }});
        match api
            .patch(&sa, &PatchParams::default(), &Patch::Merge(patch))
            .await
        {
            Ok(_) => tracing::info!(
                service_account = sa,
                cluster_id = id,
                "bound a member ServiceAccount to the cluster ID of the announce it created"
            ),
            Err(e) => {
                failures += 1;
                tracing::warn!(service_account = sa, cluster_id = id, error = %e, "binding a member ServiceAccount failed; retrying");
            }
        }
    }
    failures
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::ServiceAccount;
    use mc_api::{
        memberclusterannounce::{MemberClusterAnnounce, MemberClusterAnnounceFields},
        names::annotations,
    };

    use super::pending;

    fn sa(name: &str, id: Option<&str>) -> Arc<ServiceAccount> {
        let mut s = ServiceAccount::default();
        s.metadata.name = Some(name.into());
        s.metadata.resource_version = Some("7".into());
        if let Some(id) = id {
            s.metadata.annotations =
                Some([(annotations::CLUSTER_ID.to_owned(), id.to_owned())].into());
        }
        Arc::new(s)
    }

    fn mca(id: &str, by: Option<&str>) -> Arc<MemberClusterAnnounce> {
        let mut m = MemberClusterAnnounce::new(
            &format!("member-announce-from-{id}"),
            MemberClusterAnnounceFields {
                cluster_id: Some(id.into()),
                ..Default::default()
            },
        );
        if let Some(by) = by {
            m.metadata.annotations =
                Some([(annotations::ANNOUNCED_BY.to_owned(), by.to_owned())].into());
        }
        Arc::new(m)
    }

    #[test]
    fn binds_the_stamped_creator_once_and_never_over_another_holder() {
        let accounts = [sa("member-east", None), sa("member-west", Some("west"))];
        assert_eq!(
            pending(&[mca("east", Some("member-east"))], &accounts),
            [("member-east".to_owned(), "7".to_owned(), "east".to_owned())]
        );
        // Already bound, not stamped, ServiceAccount gone, ID held by another: nothing.
        for (m, accts) in [
            (mca("west", Some("member-west")), accounts.to_vec()),
            (mca("east", None), accounts.to_vec()),
            (mca("east", Some("member-gone")), accounts.to_vec()),
            (mca("west", Some("member-east")), accounts.to_vec()),
        ] {
            assert!(pending(&[m], &accts).is_empty());
        }
    }
}
