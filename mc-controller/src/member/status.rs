//! The member's ClusterSet status: whether it reaches its leader, and why not.

use super::*;

/// The member's ClusterSet status: one entry, for its leader, with `Ready` and `IsLeader`.
pub fn member_status(
    leader_id: &str,
    beat: Option<&Beat>,
    problem: Option<(&'static str, String)>,
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
    keep_transition_time(&mut overall, old.map(|o| o.conditions.as_slice()));
    ClusterSetStatus {
        total_clusters: Some(1),
        ready_clusters: Some(ready_count),
        conditions: vec![overall],
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
        let status = member_status(
            &leader_id,
            beat,
            problem,
            set.metadata.generation,
            set.status.as_ref(),
        );
        if set.status.as_ref().is_some_and(|old| old.same(&status)) {
            return 0;
        }
        let mut value = serde_json::to_value(&status).unwrap_or_default();
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
    use super::*;

    #[test]
    fn member_status_tells_why_it_is_not_ready() {
        let s = member_status("north", None, None, Some(1), None);
        assert_eq!(s.conditions[0].status.as_deref(), Some("Unknown"));
        let bad = Beat {
            connected: Some(false),
            message: "the leader refused the token".into(),
            is_leader: false,
        };
        let s = member_status("north", Some(&bad), None, Some(1), Some(&s));
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
        let s = member_status("north", Some(&good), None, Some(1), Some(&s));
        assert_eq!((s.total_clusters, s.ready_clusters), (Some(1), Some(1)));
        assert_eq!(s.conditions[0].status.as_deref(), Some("True"));
        let s = member_status(
            "north",
            None,
            Some(problem("SecretNotFound", "Secret x not found".into())),
            Some(1),
            Some(&s),
        );
        assert_eq!(s.conditions[0].reason.as_deref(), Some("SecretNotFound"));
    }
}
