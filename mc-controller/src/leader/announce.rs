//! What the leader accepts of the members' announcements before any cluster routes them.
//!
//! A ClusterInfo's CIDRs become host routes on every other member's Nodes, its gateway IPs their
//! tunnel peers, and an exporter's endpoints the addresses other clusters' clients are sent to.
//! So the leader checks each ClusterInfo against the special ranges, a floor on prefix length and
//! every ClusterInfo it already accepted (the earlier keeps its CIDRs; the later is refused,
//! naming the cluster and prefix it collides with), and accepts an Endpoints export only when
//! every address lies inside its exporter's accepted CIDRs. Pure: the same exports always give
//! the same verdicts.

use std::{collections::BTreeMap, net::Ipv4Addr};

use mc_api::{clusterinfo::ClusterInfo, net::Prefix};

pub use mc_api::config::DEFAULT_MIN_ANNOUNCED_PREFIX_LENGTH as DEFAULT_MIN_PREFIX_LENGTH;

/// One prefix of an announcement, checked on its own (normalised).
pub fn check_prefix(text: &str, min_len: u8) -> Result<Prefix, String> {
    // Host bits are cleared, not refused: the guide's own example is `10.10.1.1/16`.
    let p = Prefix::parse(text)?;
    if p.len < min_len {
        return Err(format!(
            "{p} is wider than /{min_len} (minAnnouncedPrefixLength): no cluster's CIDR is that wide"
        ));
    }
    if let Some(why) = p.special() {
        return Err(why);
    }
    Ok(p)
}

/// A ClusterInfo the leader accepted: what other clusters may route toward its gateways.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accepted {
    pub service: Prefix,
    pub pods: Vec<Prefix>,
    pub gateways: Vec<Ipv4Addr>,
}

impl Accepted {
    fn prefixes(&self) -> impl Iterator<Item = &Prefix> {
        std::iter::once(&self.service).chain(&self.pods)
    }

    /// Whether `ip` is an address other clusters may be sent to for this cluster: inside its
    /// Service CIDR or one of its Pod CIDRs.
    pub fn holds(&self, ip: &str) -> bool {
        self.prefixes().any(|p| p.contains_ip(ip))
    }

    pub fn describe(&self) -> String {
        let pods: Vec<String> = self.pods.iter().map(ToString::to_string).collect();
        format!(
            "Service CIDR {}, Pod CIDRs [{}]",
            self.service,
            pods.join(", ")
        )
    }
}

/// One ClusterInfo export as the leader weighs it.
#[derive(Clone, Debug)]
pub struct Announcement<'a> {
    /// The ResourceExport's name.
    pub export: String,
    /// The exporting cluster.
    pub cluster: String,
    /// What the export announces now.
    pub info: &'a ClusterInfo,
    /// What its import holds, if the leader imported it before: an accepted announcement keeps
    /// its CIDRs against a newcomer whatever their ages, and stays imported while a change to
    /// it is refused.
    pub imported: Option<&'a ClusterInfo>,
}

/// The verdicts on every ClusterInfo.
#[derive(Debug, Default)]
pub struct Verdicts {
    /// What other clusters may route toward each cluster, by cluster.
    pub accepted: BTreeMap<String, Accepted>,
    /// Refused announcements, by export name, with why.
    pub refused: BTreeMap<String, String>,
    /// Accepted announcements with Pod CIDRs left out, by export name, with why.
    pub partly: BTreeMap<String, String>,
    /// What each export's import holds, by export name: its announcement when accepted (less
    /// the Pod CIDRs left out), the one imported before when a change to it was refused,
    /// nothing otherwise.
    pub imports: BTreeMap<String, ClusterInfo>,
}

/// What every announcement is weighed against besides the others: the floor on prefix length
/// and addresses no announced prefix may hold (the leader cluster's Nodes and API server: a
/// member routing them into a tunnel would lose its leader).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rules {
    pub min_len: u8,
    pub reserved: Vec<(Ipv4Addr, String)>,
}

impl Rules {
    pub fn new(min_len: u8) -> Self {
        Self {
            min_len,
            reserved: Vec::new(),
        }
    }
}

/// Weighs `announcements`, given oldest first: first what is imported already (as imported),
/// then what is new or changed, each against everything accepted before it. The Service CIDR
/// and the gateways decide whether an announcement is accepted; a Pod CIDR that fails a check
/// is left out on its own (Pod CIDRs matter only for Pod-to-Pod traffic).
pub fn weigh(announcements: &[Announcement], rules: &Rules) -> Verdicts {
    let mut out = Verdicts::default();
    // Which export each accepted entry came from.
    let mut from: BTreeMap<String, String> = BTreeMap::new();
    for a in announcements {
        let Some(held) = a.imported else { continue };
        if from.contains_key(&a.cluster) {
            continue;
        }
        // One with Pod CIDRs left out is weighed again below, as changed (one may fit now).
        if let Ok((accepted, _)) = accept(&a.cluster, held, &out.accepted, rules) {
            out.imports
                .insert(a.export.clone(), restricted(held, &accepted.pods));
            out.accepted.insert(a.cluster.clone(), accepted);
            from.insert(a.cluster.clone(), a.export.clone());
        }
        // An import that no longer passes (a leader upgraded to stricter checks, a floor
        // raised) is weighed again below as if new.
    }
    for a in announcements {
        let whole = out.imports.get(&a.export) == Some(a.info);
        if whole && a.imported == Some(a.info) {
            continue;
        }
        if from.get(&a.cluster).is_some_and(|e| *e != a.export) {
            out.refused.insert(
                a.export.clone(),
                format!(
                    "cluster {} already announced its ClusterInfo in export {}",
                    a.cluster, from[&a.cluster]
                ),
            );
            continue;
        }
        // Its own earlier announcement is not in its way.
        let earlier = out.accepted.remove(&a.cluster);
        match accept(&a.cluster, a.info, &out.accepted, rules) {
            Ok((accepted, left_out)) => {
                out.imports
                    .insert(a.export.clone(), restricted(a.info, &accepted.pods));
                if !left_out.is_empty() {
                    out.partly.insert(
                        a.export.clone(),
                        format!("Pod CIDRs not routed: {}", left_out.join("; ")),
                    );
                }
                out.accepted.insert(a.cluster.clone(), accepted);
                from.insert(a.cluster.clone(), a.export.clone());
            }
            Err(why) => {
                let why = match earlier {
                    Some(earlier) => {
                        out.accepted.insert(a.cluster.clone(), earlier);
                        format!("{why}; its earlier announcement stays in force")
                    }
                    None => why,
                };
                out.refused.insert(a.export.clone(), why);
            }
        }
    }
    out
}

/// `info` with only the Pod CIDRs in `pods`.
fn restricted(info: &ClusterInfo, pods: &[Prefix]) -> ClusterInfo {
    ClusterInfo {
        pod_cidrs: info
            .pod_cidrs
            .iter()
            .filter(|c| Prefix::parse(c).is_ok_and(|p| pods.contains(&p)))
            .cloned()
            .collect(),
        ..info.clone()
    }
}

/// Why the prefix `p` of this announcement may not be routed: it holds a reserved address or
/// one of its own gateways, or overlaps (or holds a gateway of) a cluster accepted before.
fn collides(
    p: &Prefix,
    gateways: &[Ipv4Addr],
    accepted: &BTreeMap<String, Accepted>,
    rules: &Rules,
) -> Option<String> {
    if let Some((ip, what)) = rules
        .reserved
        .iter()
        .find(|(ip, _)| p.contains(&Prefix::new(*ip, 32)))
    {
        return Some(format!(
            "{p} holds {ip}, {what}: routing it would cut members off their leader"
        ));
    }
    // A route to a CIDR holding the tunnel's peer would send the tunnel into itself.
    if let Some(ip) = gateways
        .iter()
        .find(|ip| p.contains(&Prefix::new(**ip, 32)))
    {
        return Some(format!("{p} holds its own gatewayIP {ip}"));
    }
    for (other, theirs) in accepted {
        if let Some(q) = theirs.prefixes().find(|q| q.overlaps(p)) {
            return Some(format!(
                "{p} overlaps {q} of cluster {other}, accepted first: CIDRs must be unique across the ClusterSet"
            ));
        }
        if let Some(ip) = theirs
            .gateways
            .iter()
            .find(|ip| p.contains(&Prefix::new(**ip, 32)))
        {
            return Some(format!(
                "{p} holds {ip}, a gateway IP of cluster {other}: routing it would capture that tunnel"
            ));
        }
    }
    None
}

/// `info` checked on its own and against every announcement accepted before it: the accepted
/// part, and why each Pod CIDR left out was.
fn accept(
    cluster: &str,
    info: &ClusterInfo,
    accepted: &BTreeMap<String, Accepted>,
    rules: &Rules,
) -> Result<(Accepted, Vec<String>), String> {
    let min_len = rules.min_len;
    if info.cluster_id.as_deref() != Some(cluster) {
        return Err(format!(
            "clusterInfo.clusterID {:?} is not the exporting cluster {cluster:?}",
            info.cluster_id.as_deref().unwrap_or_default(),
        ));
    }
    let mut gateways = Vec::new();
    for g in &info.gateway_infos {
        let text = g.gateway_ip.as_deref().unwrap_or_default();
        let ip: Ipv4Addr = text
            .parse()
            .map_err(|_| format!("gatewayIP {text:?} is not an IPv4 address"))?;
        if let Some(why) = Prefix::new(ip, 32).special() {
            return Err(format!("gatewayIP {ip}: {why}"));
        }
        if ip.is_broadcast() || ip.is_unspecified() {
            return Err(format!("gatewayIP {ip} is not a unicast address"));
        }
        for (other, theirs) in accepted {
            if theirs.gateways.contains(&ip) {
                return Err(format!(
                    "gatewayIP {ip} is already the gateway IP of cluster {other}"
                ));
            }
            if let Some(q) = theirs.prefixes().find(|q| q.contains(&Prefix::new(ip, 32))) {
                return Err(format!("gatewayIP {ip} lies inside {q} of cluster {other}"));
            }
        }
        gateways.push(ip);
    }
    let service = info
        .service_cidr
        .as_deref()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| "serviceCIDR is empty".to_owned())
        .and_then(|s| check_prefix(s, min_len).map_err(|e| format!("serviceCIDR: {e}")))?;
    if let Some(why) = collides(&service, &gateways, accepted, rules) {
        return Err(format!("serviceCIDR: {why}"));
    }
    let mut pods: Vec<Prefix> = Vec::new();
    let mut left_out = Vec::new();
    for text in &info.pod_cidrs {
        let checked = check_prefix(text, min_len).and_then(|p| {
            if p.overlaps(&service) {
                return Err(format!("{p} overlaps its own serviceCIDR {service}"));
            }
            match collides(&p, &gateways, accepted, rules) {
                Some(why) => Err(why),
                None => Ok(p),
            }
        });
        match checked {
            Ok(p) if pods.iter().any(|q| q.overlaps(&p) && *q != p) => {
                left_out.push(format!("{p} overlaps another of its Pod CIDRs"));
            }
            Ok(p) if !pods.contains(&p) => pods.push(p),
            Ok(_) => {}
            Err(why) => left_out.push(why),
        }
    }
    Ok((
        Accepted {
            service,
            pods,
            gateways,
        },
        left_out,
    ))
}

/// The addresses of an exporter's endpoints that lie outside its accepted CIDRs (all of them
/// when it has no accepted ClusterInfo), as the refusal names them; `None` when all are inside.
pub fn outside<'a>(
    cluster: &str,
    accepted: Option<&Accepted>,
    ips: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    let bad: Vec<&str> = ips
        .into_iter()
        .filter(|ip| accepted.is_none_or(|a| !a.holds(ip)))
        .collect();
    if bad.is_empty() {
        return None;
    }
    let shown: Vec<&str> = bad.iter().take(5).copied().collect();
    let more = if bad.len() > shown.len() {
        format!(" and {} more", bad.len() - shown.len())
    } else {
        String::new()
    };
    Some(match accepted {
        None => format!(
            "endpoints {}{more} cannot be routed: cluster {cluster} has no accepted ClusterInfo (not announced yet, or refused: see its ClusterInfo export)",
            shown.join(", ")
        ),
        Some(a) => format!(
            "endpoints {}{more} lie outside cluster {cluster}'s accepted {}: only addresses there are imported",
            shown.join(", "),
            a.describe()
        ),
    })
}

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use mc_api::{
        clusterinfo::{ClusterInfo, GatewayInfo},
        net::Prefix,
    };
    use proptest::prelude::*;

    use super::{Accepted, Announcement, DEFAULT_MIN_PREFIX_LENGTH, Rules, outside, weigh};

    fn info(cluster: &str, service: &str, pods: &[&str], gw: &str) -> ClusterInfo {
        ClusterInfo {
            cluster_id: Some(cluster.into()),
            service_cidr: Some(service.into()),
            pod_cidrs: pods.iter().map(|p| (*p).to_owned()).collect(),
            gateway_infos: vec![GatewayInfo {
                gateway_ip: Some(gw.into()),
            }],
            ..Default::default()
        }
    }

    fn ann<'a>(cluster: &str, info: &'a ClusterInfo, imported: bool) -> Announcement<'a> {
        Announcement {
            export: format!("{cluster}-clusterinfo"),
            cluster: cluster.into(),
            info,
            imported: imported.then_some(info),
        }
    }

    /// The guides' clusters: kubeadm's defaults differ per cluster in the guide's examples.
    fn honest() -> (ClusterInfo, ClusterInfo) {
        (
            info(
                "test-cluster-east",
                "10.97.0.0/16",
                &["10.244.0.0/16"],
                "198.18.1.1",
            ),
            info(
                "test-cluster-west",
                "10.98.0.0/16",
                &["10.245.0.0/16"],
                "198.18.2.1",
            ),
        )
    }

    fn refused(attacker: ClusterInfo) -> String {
        let (east, west) = honest();
        let v = weigh(
            &[
                ann("test-cluster-east", &east, true),
                ann("test-cluster-west", &west, true),
                ann("evil", &attacker, false),
            ],
            &Rules {
                min_len: DEFAULT_MIN_PREFIX_LENGTH,
                // The leader cluster's Node and API server.
                reserved: vec![
                    (
                        [198, 18, 10, 1].into(),
                        "a Node of the leader cluster".into(),
                    ),
                    ([198, 18, 0, 10].into(), "the leader's API server".into()),
                ],
            },
        );
        assert_eq!(v.accepted.len(), 2, "{v:?}");
        v.refused.get("evil-clusterinfo").cloned().expect("refused")
    }

    #[test]
    fn the_guides_examples_are_accepted() {
        // seed 000's ClusterInfoImport, with seed 001's podCIDRs (host bits and all).
        let east = info(
            "test-cluster-east",
            "110.96.0.0/20",
            &["10.10.1.1/16"],
            "10.17.27.55",
        );
        let v = weigh(
            &[ann("test-cluster-east", &east, false)],
            &Rules::new(DEFAULT_MIN_PREFIX_LENGTH),
        );
        assert!(v.refused.is_empty(), "{v:?}");
        assert_eq!(
            v.accepted["test-cluster-east"].pods[0].to_string(),
            "10.10.0.0/16"
        );
    }

    #[test]
    fn honest_announcements_are_accepted() {
        let (east, west) = honest();
        let v = weigh(
            &[
                ann("test-cluster-east", &east, false),
                ann("test-cluster-west", &west, false),
            ],
            &Rules::new(DEFAULT_MIN_PREFIX_LENGTH),
        );
        assert!(v.refused.is_empty(), "{v:?}");
        assert_eq!(v.accepted.len(), 2);
    }

    #[test]
    fn each_bad_announcement_is_refused_with_its_reason() {
        let gw = "198.18.3.1";
        for (attacker, says) in [
            // Another member's Service CIDR.
            (
                info("evil", "10.97.0.0/16", &[], gw),
                "overlaps 10.97.0.0/16 of cluster test-cluster-east",
            ),
            // A subnet holding another member's gateway, the leader's Node, its API server.
            (
                info("evil", "198.18.1.0/24", &[], gw),
                "holds 198.18.1.1, a gateway IP of cluster test-cluster-east",
            ),
            (
                info("evil", "198.18.10.0/24", &[], gw),
                "holds 198.18.10.1, a Node of the leader cluster",
            ),
            (
                info("evil", "198.18.0.0/24", &[], gw),
                "holds 198.18.0.10, the leader's API server",
            ),
            // The cloud metadata service, half the Internet, loopback, multicast.
            (info("evil", "169.254.169.254/32", &[], gw), "link-local"),
            (info("evil", "128.0.0.0/1", &[], gw), "wider than /8"),
            (info("evil", "0.0.0.0/0", &[], gw), "wider than /8"),
            (info("evil", "127.0.0.0/8", &[], gw), "loopback"),
            (info("evil", "224.0.0.0/8", &[], gw), "multicast"),
            (info("evil", "not-a-cidr", &[], gw), "not a CIDR"),
            (info("evil", "", &[], gw), "serviceCIDR is empty"),
            // A duplicate gateway IP, one inside another's CIDR, one inside its own.
            (
                info("evil", "10.99.0.0/16", &[], "198.18.2.1"),
                "already the gateway IP of cluster test-cluster-west",
            ),
            (
                info("evil", "10.99.0.0/16", &[], "10.244.3.3"),
                "inside 10.244.0.0/16 of cluster test-cluster-east",
            ),
            (
                info("evil", "10.99.0.0/16", &[], "10.99.1.1"),
                "holds its own gatewayIP",
            ),
            (
                info("evil", "10.99.0.0/16", &[], "169.254.1.1"),
                "link-local",
            ),
            (
                info("evil", "10.99.0.0/16", &[], "nope"),
                "not an IPv4 address",
            ),
            // Another cluster's ID.
            (
                info("test-cluster-west", "10.99.0.0/16", &[], gw),
                "not the exporting cluster",
            ),
        ] {
            let why = refused(attacker.clone());
            assert!(
                why.contains(says),
                "{attacker:?}: {why:?} should say {says:?}"
            );
        }
    }

    #[test]
    fn a_bad_pod_cidr_is_left_out_and_the_rest_accepted() {
        let (east, west) = honest();
        let gw = "198.18.3.1";
        let pods = [
            "10.99.0.0/16",
            // kind's and kubeadm's default, east's already.
            "10.244.0.0/16",
            "198.18.1.0/24",
            "198.18.10.0/24",
            "128.0.0.0/1",
            "169.254.0.0/16",
            "10.245.128.0/17",
            "198.18.3.0/24",
            "not-a-cidr",
        ];
        let mine = info("later", "10.98.128.0/17", &pods, gw);
        let mine = ClusterInfo {
            service_cidr: Some("10.100.0.0/16".into()),
            ..mine
        };
        let v = weigh(
            &[
                ann("test-cluster-east", &east, true),
                ann("test-cluster-west", &west, true),
                ann("later", &mine, false),
            ],
            &Rules {
                min_len: 8,
                reserved: vec![(
                    [198, 18, 10, 1].into(),
                    "a Node of the leader cluster".into(),
                )],
            },
        );
        assert!(v.refused.is_empty(), "{v:?}");
        let held = &v.imports["later-clusterinfo"];
        assert_eq!(held.pod_cidrs, ["10.99.0.0/16"]);
        assert_eq!(held.service_cidr.as_deref(), Some("10.100.0.0/16"));
        let why = &v.partly["later-clusterinfo"];
        for says in [
            "10.244.0.0/16 overlaps 10.244.0.0/16 of cluster test-cluster-east",
            "198.18.1.0/24 holds 198.18.1.1, a gateway IP of cluster test-cluster-east",
            "198.18.10.0/24 holds 198.18.10.1, a Node of the leader cluster",
            "128.0.0.0/1 is wider than /8",
            "link-local",
            "10.245.128.0/17 overlaps 10.245.0.0/16 of cluster test-cluster-west",
            "198.18.3.0/24 holds its own gatewayIP 198.18.3.1",
            "not a CIDR",
        ] {
            assert!(why.contains(says), "{says:?} missing from {why}");
        }
    }

    #[test]
    fn of_two_clusters_on_the_same_defaults_the_later_is_refused_naming_both() {
        let a = info("a", "10.96.0.0/12", &["10.244.0.0/16"], "198.18.1.1");
        let b = info("b", "10.96.0.0/12", &["10.244.0.0/16"], "198.18.2.1");
        // Oldest first: a.
        let v = weigh(&[ann("a", &a, false), ann("b", &b, false)], &Rules::new(8));
        assert!(v.accepted.contains_key("a"));
        let why = &v.refused["b-clusterinfo"];
        assert!(
            why.contains("10.96.0.0/12 overlaps 10.96.0.0/12 of cluster a"),
            "{why}"
        );
        // Already imported beats older: b keeps its CIDRs once accepted.
        let v = weigh(&[ann("a", &a, false), ann("b", &b, true)], &Rules::new(8));
        assert!(v.accepted.contains_key("b") && v.refused.contains_key("a-clusterinfo"));
    }

    #[test]
    fn a_refused_change_leaves_the_earlier_announcement_imported() {
        let (east, west) = honest();
        let evil = info("test-cluster-west", "10.97.0.0/16", &[], "198.18.2.1");
        let changed = Announcement {
            imported: Some(&west),
            ..ann("test-cluster-west", &evil, false)
        };
        let v = weigh(
            &[changed, ann("test-cluster-east", &east, true)],
            &Rules::new(8),
        );
        assert!(v.refused["test-cluster-west-clusterinfo"].contains("overlaps"));
        assert_eq!(
            v.imports["test-cluster-west-clusterinfo"], west,
            "the earlier one stays"
        );
        assert_eq!(
            v.accepted["test-cluster-west"].service.to_string(),
            "10.98.0.0/16"
        );
        // A good change replaces it.
        let better = info(
            "test-cluster-west",
            "10.98.0.0/16",
            &["10.246.0.0/16"],
            "198.18.2.1",
        );
        let changed = Announcement {
            imported: Some(&west),
            ..ann("test-cluster-west", &better, false)
        };
        let v = weigh(
            &[changed, ann("test-cluster-east", &east, true)],
            &Rules::new(8),
        );
        assert!(v.refused.is_empty(), "{v:?}");
        assert_eq!(v.imports["test-cluster-west-clusterinfo"], better);
    }

    #[test]
    fn the_floor_is_configurable() {
        let wide = info("a", "10.0.0.0/8", &[], "198.18.1.1");
        assert!(
            weigh(&[ann("a", &wide, false)], &Rules::new(8))
                .refused
                .is_empty()
        );
        assert!(
            weigh(&[ann("a", &wide, false)], &Rules::new(12)).refused["a-clusterinfo"]
                .contains("/12")
        );
    }

    #[test]
    fn endpoints_outside_the_exporters_cidrs_are_named() {
        let (east, _) = honest();
        let v = weigh(&[ann("test-cluster-east", &east, true)], &Rules::new(8));
        let a = v.accepted.get("test-cluster-east");
        assert_eq!(
            outside("test-cluster-east", a, ["10.97.0.12", "10.244.1.7"]),
            None
        );
        let why = outside(
            "test-cluster-east",
            a,
            ["10.97.0.12", "198.18.2.1", "8.8.8.8"],
        )
        .unwrap();
        assert!(why.contains("198.18.2.1, 8.8.8.8 lie outside"), "{why}");
        assert!(
            outside("west", None, ["10.98.0.1"])
                .unwrap()
                .contains("no accepted ClusterInfo")
        );
    }

    proptest! {
        /// Whatever is announced, no two accepted clusters overlap, and no accepted CIDR is
        /// special, wider than the floor or holds an accepted gateway.
        #[test]
        fn accepted_announcements_never_collide(
            raw in proptest::collection::vec(
                ((0u32..=u32::MAX, 0u8..=32), proptest::collection::vec((0u32..=u32::MAX, 0u8..=32), 0..3), 0u32..=u32::MAX),
                1..6,
            )
        ) {
            let infos: Vec<ClusterInfo> = raw
                .iter()
                .enumerate()
                .map(|(i, ((s, sl), pods, gw))| {
                    let cidr = |a: u32, l: u8| Prefix::new(Ipv4Addr::from(a), l).to_string();
                    let pods: Vec<String> = pods.iter().map(|(a, l)| cidr(*a, *l)).collect();
                    let pods: Vec<&str> = pods.iter().map(String::as_str).collect();
                    info(&format!("c{i}"), &cidr(*s, *sl), &pods, &Ipv4Addr::from(*gw).to_string())
                })
                .collect();
            let anns: Vec<Announcement> = infos
                .iter()
                .enumerate()
                .map(|(i, inf)| ann(&format!("c{i}"), inf, i % 2 == 0))
                .collect();
            let v = weigh(&anns, &Rules::new(8));
            prop_assert_eq!(v.accepted.len() + v.refused.len(), infos.len());
            let all: Vec<(&String, &Accepted)> = v.accepted.iter().collect();
            for (i, (a, x)) in all.iter().enumerate() {
                for p in x.prefixes() {
                    prop_assert!(p.len >= 8 && p.special().is_none());
                    for (b, y) in &all[i + 1..] {
                        prop_assert!(y.prefixes().all(|q| !q.overlaps(p)), "{} and {} overlap", a, b);
                    }
                    for (_, y) in &all {
                        prop_assert!(y.gateways.iter().all(|g| !p.contains(&Prefix::new(*g, 32))));
                    }
                }
            }
        }
    }
}
