//! Member liveness from MemberClusterAnnounce heartbeats, and the leader's ClusterSet status.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use mc_api::clusterset::{ClusterSetStatus, ClusterStatus};

use crate::conditions::{condition, keep_transition_time};

/// How the leader judges members.
#[derive(Clone, Copy, Debug)]
pub struct Liveness {
    /// No heartbeat for this long: Disconnected.
    pub timeout: SignedDuration,
    /// Disconnected for this long more: the member's endpoints are withdrawn from the imports.
    pub withdraw_after: SignedDuration,
}

impl Default for Liveness {
    fn default() -> Self {
        Self {
            timeout: SignedDuration::from_secs(25),
            withdraw_after: SignedDuration::from_secs(60),
        }
    }
}

/// When the leader last saw each member's announce change.
#[derive(Debug, Default)]
pub struct Tracker {
    seen: BTreeMap<String, (String, Timestamp)>,
}

impl Tracker {
    /// `announces`: (cluster ID, resourceVersion, touch-ts annotation). A new resourceVersion is a
    /// heartbeat seen now; an announce seen for the first time (a leader restart) counts from its
    /// own touch-ts, so a member that stopped while the leader was down is not called connected.
    pub fn observe<'a>(
        &mut self,
        announces: impl IntoIterator<Item = (&'a str, &'a str, Option<&'a str>)>,
        now: Timestamp,
    ) {
        let mut present = BTreeSet::new();
        for (cluster, rv, touch) in announces {
            present.insert(cluster.to_owned());
            match self.seen.get_mut(cluster) {
                Some((old_rv, at)) if old_rv != rv => {
                    *old_rv = rv.to_owned();
                    *at = now;
                }
                Some(_) => {}
                None => {
                    let at = touch
                        .and_then(|t| t.parse::<Timestamp>().ok())
                        .map_or(now, |t| t.min(now));
                    self.seen.insert(cluster.to_owned(), (rv.to_owned(), at));
                }
            }
        }
        self.seen.retain(|c, _| present.contains(c));
    }

    /// Last heartbeat per member.
    pub fn last_seen(&self) -> impl Iterator<Item = (&str, Timestamp)> {
        self.seen.iter().map(|(c, (_, at))| (c.as_str(), *at))
    }

    /// Members silent for longer than `max_age`: their announces are removed (as Antrea's stale
    /// controller does after 24 h), and with them, as for a member that left, their exports.
    pub fn expired(&self, max_age: SignedDuration, now: Timestamp) -> BTreeSet<String> {
        self.last_seen()
            .filter(|(_, at)| now.duration_since(*at) > max_age)
            .map(|(c, _)| c.to_owned())
            .collect()
    }

    /// Members whose endpoints are withdrawn: silent for longer than timeout + grace.
    pub fn withdrawn(&self, liveness: Liveness, now: Timestamp) -> BTreeSet<String> {
        self.last_seen()
            .filter(|(_, at)| now.duration_since(*at) > liveness.timeout + liveness.withdraw_after)
            .map(|(c, _)| c.to_owned())
            .collect()
    }
}

/// What the leader made of a member's current ClusterInfo, when not all of it was accepted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Announced {
    /// Refused, with why: its current CIDRs are routed nowhere, so it is not Ready.
    Refused(String),
    /// Accepted with Pod CIDRs left out, with which and why: Ready, and the status says so.
    Partly(String),
}

/// The leader's ClusterSet status. `problem`: why the ClusterSet itself is not usable (for
/// example, this cluster is not its leader). `refused`: members whose ClusterInfo the leader did
/// not accept whole.
pub fn leader_status(
    tracker: &Tracker,
    liveness: Liveness,
    now: Timestamp,
    generation: Option<i64>,
    problem: Option<(&str, String)>,
    refused: &BTreeMap<String, Announced>,
    old: Option<&ClusterSetStatus>,
) -> ClusterSetStatus {
    // By cluster ID, once: a lookup per member (not a scan of every member for each).
    let old_by_id: std::collections::HashMap<&str, &ClusterStatus> = old
        .iter()
        .flat_map(|o| &o.cluster_statuses)
        .filter_map(|s| Some((s.cluster_id.as_deref()?, s)))
        .collect();
    let old_member = |id: &str| old_by_id.get(id).copied();
    let mut statuses = Vec::new();
    let mut ready = 0;
    for (cluster, at) in tracker.last_seen() {
        let connected = now.duration_since(at) <= liveness.timeout;
        let mut c = match refused.get(cluster).filter(|_| connected) {
            Some(Announced::Refused(why)) => condition("Ready", "False", "ClusterInfoRefused", why),
            Some(Announced::Partly(why)) => {
                ready += 1;
                condition(
                    "Ready",
                    "True",
                    "Connected",
                    &format!("Member Connected; {why}"),
                )
            }
            None if connected => {
                ready += 1;
                condition("Ready", "True", "Connected", "Member Connected")
            }
            None => condition(
                "Ready",
                "False",
                "Disconnected",
                &format!(
                    "No MemberClusterAnnounce update after {}",
                    at.strftime("%a %b %e %H:%M:%S UTC %Y")
                ),
            ),
        };
        keep_transition_time(&mut c, old_member(cluster).map(|s| s.conditions.as_slice()));
        statuses.push(ClusterStatus {
            cluster_id: Some(cluster.to_owned()),
            conditions: vec![c],
        });
    }
    let total = statuses.len() as i32;
    let mut overall = match problem {
        Some((reason, message)) => condition("Ready", "False", reason, &message),
        None if ready == total => condition("Ready", "True", "", ""),
        None => condition(
            "Ready",
            "False",
            "NoReadyCluster",
            &format!("{} of {total} member clusters are not ready", total - ready),
        ),
    };
    keep_transition_time(&mut overall, old.map(|o| o.conditions.as_slice()));
    ClusterSetStatus {
        total_clusters: Some(total),
        ready_clusters: Some(ready),
        conditions: vec![overall],
        cluster_statuses: statuses,
        observed_generation: generation,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    use super::{Announced, Liveness, Tracker, leader_status};

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    #[test]
    fn a_member_whose_cluster_info_was_refused_is_connected_but_not_ready() {
        let mut tr = Tracker::default();
        tr.observe([("east", "1", None), ("west", "1", None)], t(0));
        let why = "10.97.0.0/16 overlaps 10.97.0.0/16 of cluster east, accepted first".to_owned();
        let refused = BTreeMap::from([("west".to_owned(), Announced::Refused(why.clone()))]);
        let s = leader_status(&tr, Liveness::default(), t(1), None, None, &refused, None);
        assert_eq!(s.ready_clusters, Some(1));
        let west = &s.cluster_statuses[1].conditions[0];
        assert_eq!(
            (
                west.status.as_deref(),
                west.reason.as_deref(),
                west.message.as_ref()
            ),
            (Some("False"), Some("ClusterInfoRefused"), Some(&why))
        );
        assert_eq!(s.conditions[0].reason.as_deref(), Some("NoReadyCluster"));
    }

    #[test]
    fn heartbeats_keep_members_connected_and_silence_disconnects_them() {
        let none = BTreeMap::new();
        let l = Liveness::default();
        let mut tr = Tracker::default();
        tr.observe([("east", "1", None), ("west", "1", None)], t(0));
        tr.observe([("east", "2", None), ("west", "1", None)], t(20));
        let s = leader_status(&tr, l, t(30), Some(1), None, &none, None);
        assert_eq!((s.total_clusters, s.ready_clusters), (Some(2), Some(1)));
        let west = &s.cluster_statuses[1];
        assert_eq!(west.cluster_id.as_deref(), Some("west"));
        assert_eq!(west.conditions[0].reason.as_deref(), Some("Disconnected"));
        assert_eq!(s.conditions[0].reason.as_deref(), Some("NoReadyCluster"));
        assert!(tr.withdrawn(l, t(30)).is_empty());
        assert_eq!(tr.withdrawn(l, t(86)), BTreeSet::from(["west".to_owned()]));
        // A returning member is connected again and no longer withdrawn.
        tr.observe([("east", "3", None), ("west", "2", None)], t(90));
        let s = leader_status(&tr, l, t(91), Some(1), None, &none, Some(&s));
        assert_eq!(s.ready_clusters, Some(2));
        assert_eq!(s.conditions[0].status.as_deref(), Some("True"));
        assert!(tr.withdrawn(l, t(91)).is_empty());
    }

    #[test]
    fn a_restarted_leader_trusts_touch_ts_not_its_own_clock() {
        let mut tr = Tracker::default();
        let stale = t(0).to_string();
        tr.observe([("east", "7", Some(stale.as_str()))], t(100));
        let s = leader_status(
            &tr,
            Liveness::default(),
            t(100),
            None,
            None,
            &BTreeMap::new(),
            None,
        );
        assert_eq!(s.ready_clusters, Some(0));
        // Gone announces are forgotten.
        tr.observe([], t(101));
        assert_eq!(tr.last_seen().count(), 0);
    }

    #[test]
    fn a_member_silent_for_a_day_expires() {
        let day = SignedDuration::from_hours(24);
        let mut tr = Tracker::default();
        tr.observe([("east", "1", None), ("west", "1", None)], t(0));
        tr.observe([("east", "2", None), ("west", "1", None)], t(3600));
        assert!(tr.expired(day, t(86_400)).is_empty());
        assert_eq!(
            tr.expired(day, t(86_401)),
            BTreeSet::from(["west".to_owned()])
        );
        // After a leader restart, an old touch-ts counts.
        let mut tr = Tracker::default();
        let old = t(0).to_string();
        tr.observe([("west", "9", Some(old.as_str()))], t(90_000));
        assert_eq!(
            tr.expired(day, t(90_000)),
            BTreeSet::from(["west".to_owned()])
        );
    }

    #[test]
    fn transition_times_survive_unchanged_conditions() {
        let mut tr = Tracker::default();
        tr.observe([("east", "1", None)], t(0));
        let first = leader_status(
            &tr,
            Liveness::default(),
            t(1),
            None,
            None,
            &BTreeMap::new(),
            None,
        );
        let second = leader_status(
            &tr,
            Liveness::default(),
            t(9),
            None,
            None,
            &BTreeMap::new(),
            Some(&first),
        );
        assert_eq!(
            first.cluster_statuses[0].conditions[0].last_transition_time,
            second.cluster_statuses[0].conditions[0].last_transition_time
        );
        assert!(first.same(&second));
    }
}
