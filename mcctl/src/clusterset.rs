//! The ClusterSet as mcctl creates and reads it: created through an admission webhook that may
//! be unreachable for a moment, and the leader's join config derived from it.

use std::time::{Duration, Instant};

use anyhow::bail;
use kube::{
    Api, ResourceExt as _,
    api::{ListParams, PostParams},
};
use mc_api::clusterset::v1alpha2::ClusterSet;

use crate::{
    cluster::{Cluster, explain, list},
    joinconfig::JoinConfig,
};

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
pub async fn create_clusterset(
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

/// The join config of the leader's one ClusterSet in `ns` (no member token yet).
pub async fn leader_join_config(c: &Cluster, ns: &str) -> anyhow::Result<JoinConfig> {
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

#[cfg(test)]
mod tests {
    use serde_json::json;

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
}
