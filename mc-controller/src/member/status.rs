//! The member's ClusterSet status: whether it reaches its leader, and why not.

use std::sync::Arc;

use kube::{Api, ResourceExt as _};
use mc_api::{
    clusterset::{ClusterSetStatus, ClusterStatus, v1alpha2::ClusterSet},
    conditions::Condition,
    gateway::{DATAPLANE_READY, Gateway, TRAFFIC_ENCRYPTED},
};
use serde_json::json;

use super::{Member, connection::Beat};
use crate::conditions::{condition, keep_transition_time};

/// The member's own `DataplaneReady`: its elected gateway's, as the gateway Node's agent wrote it.
pub fn dataplane(gateway: Option<&Gateway>) -> Condition {
    let Some(g) = gateway else {
        return condition(
            DATAPLANE_READY,
            "Unknown",
            "NoGateway",
            "no gateway elected: annotate a Ready Node with multicluster.antrea.io/gateway=true",
        );
    };
    let node = g.name_any();
    match g.dataplane_ready() {
        None => condition(
            DATAPLANE_READY,
            "Unknown",
            "NotReported",
            &format!("gateway {node}: no agent has reported (is strait-agent running on {node}?)"),
        ),
        Some(c) => condition(
            DATAPLANE_READY,
            c.status.as_deref().unwrap_or("Unknown"),
            c.reason.as_deref().unwrap_or_default(),
            &format!(
                "gateway {node}: {}",
                c.message.as_deref().unwrap_or_default()
            ),
        ),
    }
}

/// The member's ClusterSet status: one entry, for its leader, with `Ready` and `IsLeader`; its
/// own `Ready` (False while the gateway's dataplane is not ready) and `DataplaneReady`.
pub fn member_status(
    leader_id: &str,
    beat: Option<&Beat>,
    problem: Option<(&'static str, String)>,
    gateway: Option<&Gateway>,
    generation: Option<i64>,
    old: Option<&ClusterSetStatus>,
) -> ClusterSetStatus {
    let (ready, is_leader) = match beat.and_then(|b| b.connected.map(|c| (c, b))) {
        None => (
            condition("Ready", "Unknown", "", "Leader cluster added"),
            condition("IsLeader", "False", "", "Leader cluster added"),
        ),
        Some((connected, b)) => (
            if connected {
                condition("Ready", "True", "Connected", "")
            } else {
                condition("Ready", "False", "Disconnected", &b.message)
            },
            if b.is_leader {
                condition(
                    "IsLeader",
                    "True",
                    "",
                    "This leader cluster is the leader for local cluster",
                )
            } else {
                condition("IsLeader", "False", "", "Leader cluster added")
            },
        ),
    };
    let old_conditions = old
        .and_then(|o| o.cluster_statuses.first())
        .map(|s| s.conditions.as_slice());
    let mut conditions = vec![ready, is_leader];
    for c in &mut conditions {
        keep_transition_time(c, old_conditions);
    }
    let connected = beat.and_then(|b| b.connected);
    let is_leader = beat.is_some_and(|b| b.connected.is_some() && b.is_leader);
    let ready_count = i32::from(connected == Some(true));
    let mut overall = match (&problem, connected) {
        (Some((reason, message)), _) => condition("Ready", "False", reason, message),
        (None, Some(true)) if is_leader => condition("Ready", "True", "", ""),
        (None, Some(false)) => {
            condition("Ready", "False", "Disconnected", "Disconnected from leader")
        }
        _ => condition("Ready", "Unknown", "", "Leader not yet connected"),
    };
    let mut dataplane = dataplane(gateway);
    // Connected to the leader but carrying no traffic is not Ready: imports would look usable.
    if overall.status.as_deref() == Some("True") && dataplane.status.as_deref() == Some("False") {
        overall = condition(
            "Ready",
            "False",
            "DataplaneNotReady",
            dataplane.message.as_deref().unwrap_or_default(),
        );
    }
    let old_overall = old.map(|o| o.conditions.as_slice());
    keep_transition_time(&mut overall, old_overall);
    keep_transition_time(&mut dataplane, old_overall);
    let mut conditions_own = vec![overall, dataplane];
    // Encryption between gateways, as the gateway's agent says it (only when it says anything).
    if let Some(g) = gateway
        && let Some(c) = g.condition(TRAFFIC_ENCRYPTED)
    {
        let mut c = condition(
            TRAFFIC_ENCRYPTED,
            c.status.as_deref().unwrap_or("Unknown"),
            c.reason.as_deref().unwrap_or_default(),
            &format!(
                "gateway {}: {}",
                g.name_any(),
                c.message.as_deref().unwrap_or_default()
            ),
        );
        keep_transition_time(&mut c, old_overall);
        conditions_own.push(c);
    }
    ClusterSetStatus {
        total_clusters: Some(1),
        ready_clusters: Some(ready_count),
        conditions: conditions_own,
        cluster_statuses: vec![ClusterStatus {
            cluster_id: Some(leader_id.to_owned()),
            conditions,
        }],
        observed_generation: generation,
    }
}

impl Member {
    pub(super) async fn clusterset_status(
        &self,
        set: &ClusterSet,
        beat: Option<&Beat>,
        problem: Option<(&'static str, String)>,
    ) -> usize {
        let leader_id = set
            .spec
            .leaders
            .first()
            .and_then(|l| l.cluster_id.clone())
            .unwrap_or_default();
        let mut gateways = self.local.gateways.all();
        gateways.sort_by_key(|g| g.name_any());
        let status = member_status(
            &leader_id,
            beat,
            problem,
            gateways.first().map(Arc::as_ref),
            set.metadata.generation,
            set.status.as_ref(),
        );
        if set.status.as_ref().is_some_and(|old| old.same(&status)) {
            return 0;
        }
        let mut value = serde_json::to_value(&status).unwrap_or_default();
        // An empty list is written as one (the typed status omits it), so that stale entries go.
        value["clusterStatuses"] = json!(status.cluster_statuses);
        let api: Api<ClusterSet> = Api::namespaced(self.client.clone(), &self.ns);
        match self.writer.patch_status(&api, &set.name_any(), value).await {
            Ok(()) => 0,
            Err(e) => {
                tracing::warn!(error = %e, "writing ClusterSet status");
                1
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use mc_api::{
        clusterset::ClusterSetStatus,
        gateway::{DATAPLANE_READY, Gateway},
    };

    use super::member_status;
    use crate::{
        conditions::condition,
        member::{connection::Beat, problem},
    };

    #[test]
    fn member_status_tells_why_it_is_not_ready() {
        let s = member_status("north", None, None, None, Some(1), None);
        assert_eq!(s.conditions[0].status.as_deref(), Some("Unknown"));
        let bad = Beat {
            connected: Some(false),
            message: "the leader refused the token".into(),
            is_leader: false,
        };
        let s = member_status("north", Some(&bad), None, None, Some(1), Some(&s));
        assert_eq!(s.ready_clusters, Some(0));
        assert_eq!(
            s.cluster_statuses[0].conditions[0].message.as_deref(),
            Some("the leader refused the token")
        );
        let good = Beat {
            connected: Some(true),
            message: String::new(),
            is_leader: true,
        };
        let s = member_status("north", Some(&good), None, None, Some(1), Some(&s));
        assert_eq!((s.total_clusters, s.ready_clusters), (Some(1), Some(1)));
        assert_eq!(s.conditions[0].status.as_deref(), Some("True"));
        let s = member_status(
            "north",
            None,
            Some(problem("SecretNotFound", "Secret x not found".into())),
            None,
            Some(1),
            Some(&s),
        );
        assert_eq!(s.conditions[0].reason.as_deref(), Some("SecretNotFound"));
    }

    #[test]
    fn a_gateway_whose_dataplane_is_not_ready_makes_the_member_not_ready() {
        let good = Beat {
            connected: Some(true),
            message: String::new(),
            is_leader: true,
        };
        let status =
            |gw: Option<&Gateway>| member_status("north", Some(&good), None, gw, None, None);
        let kind = |s: &ClusterSetStatus, i: usize| {
            let c = &s.conditions[i];
            (
                c.type_.clone().unwrap(),
                c.status.clone().unwrap(),
                c.reason.clone(),
            )
        };
        // No gateway, or one whose agent never reported: unknown, the member stays Ready.
        let s = status(None);
        assert_eq!(kind(&s, 0).1, "True");
        assert_eq!(
            kind(&s, 1),
            (
                "DataplaneReady".into(),
                "Unknown".into(),
                Some("NoGateway".into())
            )
        );
        let mut gw = Gateway::new("node-a", Default::default());
        assert_eq!(
            kind(&status(Some(&gw)), 1).2.as_deref(),
            Some("NotReported")
        );
        gw.status = Some(mc_api::gateway::GatewayStatus {
            conditions: vec![condition(
                DATAPLANE_READY,
                "False",
                "NotReady",
                "no uplink eth9",
            )],
        });
        let s = status(Some(&gw));
        assert_eq!(
            kind(&s, 0),
            (
                "Ready".into(),
                "False".into(),
                Some("DataplaneNotReady".into())
            )
        );
        assert_eq!(
            s.conditions[0].message.as_deref(),
            Some("gateway node-a: no uplink eth9")
        );
        assert_eq!(kind(&s, 1).1, "False");
        gw.status = Some(mc_api::gateway::GatewayStatus {
            conditions: vec![condition(DATAPLANE_READY, "True", "Attached", "")],
        });
        let s = status(Some(&gw));
        assert_eq!(
            (kind(&s, 0).1, kind(&s, 1).1),
            ("True".into(), "True".into())
        );
    }
}
