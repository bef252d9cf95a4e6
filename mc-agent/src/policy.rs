//! Stretched NetworkPolicy compiled for the gateway's policy program (docs/design.md §4b), without
//! I/O: which Pods of this cluster a ClusterSet-scoped ingress rule covers, and, for each of them
//! and each label identity of the ClusterSet, the verdict of the first rule that matches, in
//! Antrea's order (Tier priority, then policy priority, then rule order; `Pass` skips to the
//! baseline Tier). What a rule of a Pod names by port gets an entry of its own; the rest of a
//! protocol's ports, and every other port, one each.
//!
//! Only ingress rules are compiled here, and only remote sources are decided: a peer matches a
//! remote flow when it has `scope: ClusterSet` (in-cluster peers select this cluster's Pods, whose
//! traffic never comes through the gateway), a rule without `from` matches every source. Rules
//! with named ports are skipped with a reason (the program sees numbers after the DNAT).

use std::{
    collections::{BTreeMap, BTreeSet},
    net::Ipv4Addr,
};

use mc_api::{
    antrea::{
        AppliedTo, ClusterNetworkPolicySpec, DEFAULT_TIERS, Peer, PortRef, Rule as PolicyRule,
        RuleAction,
    },
    labelidentity::parse_normalized_label,
    parsed::{OrWhy, Parsed},
    selector::{Labels, Selector},
};
use mc_common::dataplane::{
    ACTION_ALLOW, ACTION_DROP, ACTION_REFUSE_ALL, ACTION_REJECT, EgressKey, MAX_POLICY_RULES,
    PolicyKey, PolicyVerdict,
};

use crate::{kube_proxy::ProxyMode, pods::PodObject};

/// The rule counter of flows no rule matched (allowed).
pub const RULE_NO_MATCH: u32 = 0;
/// The rule counter of flows without a label identity towards a covered Pod (dropped).
pub const RULE_UNKNOWN_IDENTITY: u32 = 1;

const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";
const BASELINE_TIER: &str = "baseline";
/// The largest port range a rule may name (`port`..`endPort`) to be compiled port by port.
const MAX_RANGE: u32 = 1024;
const PROTO_TCP: u8 = 6;
const PROTO_UDP: u8 = 17;
const PROTO_SCTP: u8 = 132;

/// An Antrea-native policy as read from the API.
#[derive(Clone, Debug, Default)]
pub struct PolicyObject {
    /// `None` for a ClusterNetworkPolicy; an Antrea NetworkPolicy's namespace.
    pub namespace: Option<String>,
    pub name: String,
    pub spec: ClusterNetworkPolicySpec,
}

/// What the policy maps hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Compiled {
    /// Pods a ClusterSet-scoped ingress rule covers -> the verdict without a label identity.
    pub protected: BTreeMap<Ipv4Addr, PolicyVerdict>,
    pub entries: BTreeMap<PolicyKey, PolicyVerdict>,
    /// This Node's Pods' flows to imported multi-cluster Services that egress rules decide.
    pub egress: BTreeMap<EgressKey, PolicyVerdict>,
    /// The name of each rule counter, by index.
    pub rules: Vec<String>,
    /// Policies or rules left out, and why.
    pub skipped: Vec<String>,
    /// What Strait enforces of each policy, by (namespace, name): the truth `kubectl get acnp`
    /// shows.
    pub coverage: BTreeMap<(Option<String>, String), Coverage>,
    /// The policies whose ClusterSet-scoped ingress rules cover each protected Pod.
    pub covering: BTreeMap<Ipv4Addr, BTreeSet<(Option<String>, String)>>,
}

/// What Strait does with a policy's rules: enforces them (the parts of ClusterSet scope, on
/// the traffic it carries), leaves them to the cluster's policy engine (in-cluster peers), or
/// cannot enforce them (with the reason).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Coverage {
    /// Rules (`ingress[0]`) Strait enforces.
    pub enforced: Vec<String>,
    /// Rules, or parts of rules, with in-cluster peers only.
    pub in_cluster: Vec<String>,
    /// Rules Strait cannot enforce, each with its reason.
    pub not_enforced: Vec<String>,
}

impl Compiled {
    /// Keeps the ingress entries within `capacity` (the policy map's size): Pods are taken in
    /// address order while all their entries fit; every other protected Pod keeps no entry and
    /// refuses every remote flow ([`ACTION_REFUSE_ALL`], fail closed), named in the covering
    /// policies' coverage and in `skipped`. A Pod left half-written would let through what its
    /// missing entries drop.
    pub fn fit(&mut self, capacity: usize) {
        if self.entries.len() <= capacity {
            return;
        }
        let mut per_pod: BTreeMap<[u8; 4], usize> = BTreeMap::new();
        for key in self.entries.keys() {
            *per_pod.entry(key.pod).or_default() += 1;
        }
        let mut used = 0;
        let mut refused: BTreeSet<Ipv4Addr> = BTreeSet::new();
        for ip in self.protected.keys() {
            let n = per_pod.get(&ip.octets()).copied().unwrap_or(0);
            if used + n <= capacity {
                used += n;
            } else {
                refused.insert(*ip);
            }
        }
        let rule = self.rules.len() as u32;
        self.rules
            .push("policy map full: every remote flow refused".into());
        self.entries
            .retain(|k, _| !refused.contains(&Ipv4Addr::from(k.pod)));
        let mut by_policy: BTreeMap<(Option<String>, String), Vec<String>> = BTreeMap::new();
        for ip in &refused {
            let verdict = PolicyVerdict {
                action: ACTION_REFUSE_ALL,
                rule,
            };
            self.protected.insert(*ip, verdict);
            for policy in self.covering.get(ip).into_iter().flatten() {
                by_policy
                    .entry(policy.clone())
                    .or_default()
                    .push(ip.to_string());
            }
        }
        for (policy, pods) in by_policy {
            self.coverage.entry(policy).or_default().not_enforced.push(format!(
                "ingress rules for Pods {}: the gateway's policy map holds {capacity} entries; every flow another cluster opens to them is dropped (policy_drop_map_full)",
                pods.join(", ")
            ));
        }
        self.skipped.push(format!(
            "the policy map holds {capacity} entries: {} covered Pods refuse every remote flow ({}{})",
            refused.len(),
            refused.iter().take(5).map(|ip| ip.to_string()).collect::<Vec<_>>().join(", "),
            if refused.len() > 5 { ", ..." } else { "" }
        ));
    }

    /// A digest (FNV-1a, 32 bits) of the ingress decisions: the covered Pods and every entry.
    /// The gateway's remembered verdicts (`mc_flow_verdicts`) hold the digest they were made
    /// under, so any change to the ingress policy makes them stale at once, and an agent's
    /// restart that writes the same policy keeps them.
    pub fn ingress_generation(&self) -> u32 {
        let mut h: u32 = 0x811c_9dc5;
        let mut eat = |bytes: &[u8]| {
            for b in bytes {
                h = (h ^ u32::from(*b)).wrapping_mul(0x0100_0193);
            }
        };
        for (pod, v) in &self.protected {
            eat(&pod.octets());
            eat(&v.action.to_be_bytes());
            eat(&v.rule.to_be_bytes());
        }
        eat(b"|");
        for (k, v) in &self.entries {
            eat(&k.pod);
            eat(&k.id.to_be_bytes());
            eat(&k.port.to_be_bytes());
            eat(&[k.proto]);
            eat(&v.action.to_be_bytes());
            eat(&v.rule.to_be_bytes());
        }
        h
    }
}

/// A policy's condition of type `EnforcedByStrait`: (status, reason, message).
pub const ENFORCED_CONDITION: &str = "EnforcedByStrait";

impl Coverage {
    /// `Enforced` when Strait enforces every rule, `PartlyEnforced` when some, `NotEnforced`
    /// when none; the message names the rules of each kind.
    pub fn condition(&self) -> (bool, &'static str, String) {
        let mut parts = Vec::new();
        if !self.enforced.is_empty() {
            parts.push(format!(
                "Strait enforces {} on traffic between clusters",
                self.enforced.join(", ")
            ));
        }
        if !self.in_cluster.is_empty() {
            parts.push(format!(
                "in-cluster peers ({}) need a policy engine in the cluster, such as Antrea",
                self.in_cluster.join(", ")
            ));
        }
        if !self.not_enforced.is_empty() {
            parts.push(format!("not enforced: {}", self.not_enforced.join("; ")));
        }
        if parts.is_empty() {
            parts.push("the policy has no rules".to_owned());
        }
        let reason = match (
            self.enforced.is_empty(),
            self.in_cluster.is_empty() && self.not_enforced.is_empty(),
        ) {
            (false, true) => "Enforced",
            (false, false) => "PartlyEnforced",
            (true, _) => "NotEnforced",
        };
        (reason == "Enforced", reason, parts.join("; "))
    }
}

/// A rule's action; `Pass` hands the decision to the baseline Tier.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    Verdict(u32),
    Pass,
}

/// Pods selected by `appliedTo` (or a peer): by Namespace labels and Pod labels, within one
/// Namespace for an Antrea NetworkPolicy.
#[derive(Clone, Debug)]
struct Target {
    namespace: Option<Selector>,
    pod: Option<Selector>,
    within: Option<String>,
}

impl Target {
    fn matches(&self, ns_labels: &Labels, pod_labels: &Labels) -> bool {
        let ns_name = ns_labels.get(NAMESPACE_NAME).map(String::as_str);
        if let Some(within) = &self.within
            && self.namespace.is_none()
            && ns_name != Some(within.as_str())
        {
            return false;
        }
        self.namespace.as_ref().is_none_or(|s| s.matches(ns_labels))
            && self.pod.as_ref().is_none_or(|s| s.matches(pod_labels))
    }
}

/// Which packets a rule's `ports` take: every port (empty), or `(protocol, port)` with port 0
/// for every port of the protocol.
type Ports = BTreeSet<(u8, u16)>;

#[derive(Clone, Debug)]
struct Rule {
    /// The policy's (namespace, name), as `Compiled::coverage` keys it.
    policy: (Option<String>, String),
    counter: u32,
    action: Action,
    baseline: bool,
    applied_to: Vec<Target>,
    /// `None`: every source.
    from: Option<Vec<Target>>,
    clusterset: bool,
    ports: Ports,
}

impl Rule {
    fn takes(&self, proto: u8, port: u16) -> bool {
        self.ports.is_empty()
            || self.ports.contains(&(proto, port))
            || (proto != 0 && self.ports.contains(&(proto, 0)))
    }

    fn source_matches(&self, ns_labels: &Labels, pod_labels: &Labels) -> bool {
        self.from
            .as_ref()
            .is_none_or(|peers| peers.iter().any(|p| p.matches(ns_labels, pod_labels)))
    }
}

/// An egress rule with `toServices` of `scope: ClusterSet`: the multi-cluster Services it names
/// (namespace, name), decided at the source Node on the Service's address before the DNAT.
#[derive(Clone, Debug)]
struct EgressRule {
    counter: u32,
    action: Action,
    baseline: bool,
    applied_to: Vec<Target>,
    services: Vec<(String, String)>,
}

/// The Pods `entries` select (a policy's or a rule's `appliedTo`, or a rule's peers).
/// A selector as a policy carries it: absent, read, or unreadable with why.
type Sel<'a> = Option<&'a OrWhy<Selector>>;

/// The Pods `entries` (Namespace and Pod selectors) select, or why entry `what[i]` cannot be
/// read.
fn targets<'a>(
    entries: impl IntoIterator<Item = (Sel<'a>, Sel<'a>)>,
    within: Option<&str>,
    what: &str,
) -> Result<Vec<Target>, String> {
    entries
        .into_iter()
        .enumerate()
        .map(|(i, (namespace, pod))| {
            let read = |s: Sel| {
                s.map(|s| s.0.clone().map_err(|e| format!("{what}[{i}]: {e}")))
                    .transpose()
            };
            Ok(Target {
                namespace: read(namespace)?,
                pod: read(pod)?,
                within: within.map(str::to_owned),
            })
        })
        .collect()
}

fn applied_to(
    entries: &[AppliedTo],
    within: Option<&str>,
    what: &str,
) -> Result<Vec<Target>, String> {
    targets(
        entries
            .iter()
            .map(|a| (a.namespace_selector.as_ref(), a.pod_selector.as_ref())),
        within,
        what,
    )
}

fn peers(entries: &[&Peer], within: Option<&str>, what: &str) -> Result<Vec<Target>, String> {
    targets(
        entries
            .iter()
            .map(|p| (p.namespace_selector.as_ref(), p.pod_selector.as_ref())),
        within,
        what,
    )
}

/// The packets a rule's `ports` take; an error for what the gateway cannot decide on.
fn ports(rule: &PolicyRule, what: &str) -> Result<Ports, String> {
    let mut out = Ports::new();
    for (i, p) in rule.ports.iter().enumerate() {
        let proto = match p.protocol.as_deref().unwrap_or("TCP") {
            "TCP" => PROTO_TCP,
            "UDP" => PROTO_UDP,
            "SCTP" => PROTO_SCTP,
            other => return Err(format!("{what}.ports[{i}]: protocol {other}")),
        };
        match p.port.as_ref().map(|p| &p.0) {
            None => {
                out.insert((proto, 0));
            }
            Some(Err(e)) => return Err(format!("{what}.ports[{i}]: port {e}")),
            Some(Ok(PortRef::Number(n))) => {
                let start = u32::try_from(*n)
                    .ok()
                    .filter(|n| (1..=65535).contains(n))
                    .ok_or_else(|| format!("{what}.ports[{i}]: port {n}"))?;
                let end = p
                    .end_port
                    .map_or(Ok(start), |e| u32::try_from(e).map_err(|_| e));
                let end = end.map_err(|e| format!("{what}.ports[{i}]: endPort {e}"))?;
                if end < start || end > 65535 || end - start >= MAX_RANGE {
                    return Err(format!(
                        "{what}.ports[{i}]: the range {start}-{end} (at most {MAX_RANGE} ports are compiled)"
                    ));
                }
                for port in start..=end {
                    out.insert((proto, port as u16));
                }
            }
            Some(Ok(PortRef::Name(name))) => {
                return Err(format!(
                    "{what}.ports[{i}]: named port \"{name}\" (the gateway decides on port numbers)"
                ));
            }
        }
    }
    Ok(out)
}

fn action(a: RuleAction) -> Action {
    match a {
        RuleAction::Allow => Action::Verdict(ACTION_ALLOW),
        RuleAction::Drop => Action::Verdict(ACTION_DROP),
        RuleAction::Reject => Action::Verdict(ACTION_REJECT),
        RuleAction::Pass => Action::Pass,
    }
}

/// The policies in evaluation order (Tier priority, then policy priority, then namespace and
/// name); those of a Tier that does not exist are left out, said in `skipped` and `coverage`.
fn ordered<'a>(
    policies: &'a [PolicyObject],
    tiers: &BTreeMap<String, i32>,
    skipped: &mut Vec<String>,
    coverage: &mut BTreeMap<(Option<String>, String), Coverage>,
) -> Vec<&'a PolicyObject> {
    let mut ordered: Vec<(i32, f64, &PolicyObject)> = Vec::new();
    for p in policies {
        let tier = p.spec.tier.as_deref().unwrap_or("application");
        let tier = tier.to_ascii_lowercase();
        match tiers.get(&tier) {
            Some(&priority) => ordered.push((priority, p.spec.priority, p)),
            None => {
                skipped.push(format!("{}: Tier {tier} does not exist", label(p)));
                coverage
                    .entry((p.namespace.clone(), p.name.clone()))
                    .or_default()
                    .not_enforced
                    .push(format!("every rule (Tier {tier} does not exist)"));
            }
        }
    }
    ordered.sort_by(|a, b| {
        (a.0, a.1, &a.2.namespace, &a.2.name)
            .partial_cmp(&(b.0, b.1, &b.2.namespace, &b.2.name))
            .unwrap_or(std::cmp::Ordering::Equal)
    });
    ordered.into_iter().map(|(_, _, p)| p).collect()
}

/// Where the rules of every policy go while they are read: the counters' names, what is
/// skipped, each policy's coverage, and the rules in evaluation order.
struct Gathered<'a> {
    names: &'a mut Vec<String>,
    skipped: &'a mut Vec<String>,
    ingress: Vec<Rule>,
    egress: Vec<EgressRule>,
}

impl Gathered<'_> {
    /// The counter of the next rule (the last one is shared once they run out).
    fn counter(&mut self, what: &str, action: RuleAction) -> u32 {
        let counter = (self.names.len() as u32).min(MAX_POLICY_RULES - 1);
        if counter == self.names.len() as u32 {
            self.names.push(format!("{what} {}", action.as_str()));
        }
        counter
    }

    /// A rule Strait cannot enforce, with why.
    fn refuse(&mut self, cover: &mut Coverage, why: String, name: &str) {
        cover.not_enforced.push(without_prefix(&why, name));
        self.skipped.push(why);
    }

    /// The rule `what` of policy `name` as read, or, when it could not be, refused with why.
    fn read<'r>(
        &mut self,
        cover: &mut Coverage,
        r: &'r Parsed<PolicyRule>,
        what: &str,
        name: &str,
    ) -> Option<&'r PolicyRule> {
        match r.get() {
            Ok(r) => Some(r),
            Err(e) => {
                self.refuse(cover, format!("{what}: {e}"), name);
                None
            }
        }
    }
}

/// The Pods rule `what` applies to: its own `appliedTo`, else its policy's.
fn rule_targets(
    r: &PolicyRule,
    applied: &[Target],
    within: Option<&str>,
    what: &str,
) -> Result<Vec<Target>, String> {
    match r.applied_to.as_deref() {
        Some(a) => applied_to(a, within, &format!("{what} appliedTo")),
        None => Ok(applied.to_vec()),
    }
}

/// The ingress rules of every policy, in evaluation order, each with its counter index.
fn rules(
    policies: &[PolicyObject],
    tiers: &BTreeMap<String, i32>,
    names: &mut Vec<String>,
    skipped: &mut Vec<String>,
    coverage: &mut BTreeMap<(Option<String>, String), Coverage>,
) -> (Vec<Rule>, Vec<EgressRule>) {
    let ordered = ordered(policies, tiers, skipped, coverage);
    let mut g = Gathered {
        names,
        skipped,
        ingress: Vec::new(),
        egress: Vec::new(),
    };
    for p in ordered {
        let name = label(p);
        let cover = coverage
            .entry((p.namespace.clone(), p.name.clone()))
            .or_default();
        let applied: Result<Vec<AppliedTo>, String> = p
            .spec
            .applied_to
            .iter()
            .enumerate()
            .map(|(i, a)| {
                a.get()
                    .cloned()
                    .map_err(|e| format!("{name} appliedTo[{i}]: {e}"))
            })
            .collect();
        let applied = applied
            .and_then(|a| applied_to(&a, p.namespace.as_deref(), &format!("{name} appliedTo")));
        let applied = match applied {
            Ok(applied) => applied,
            Err(e) => {
                g.refuse(cover, e, &name);
                continue;
            }
        };
        let baseline = p.spec.tier.as_deref() == Some(BASELINE_TIER);
        for (i, r) in p.spec.ingress.iter().enumerate() {
            ingress_rule(&mut g, cover, (p, &name, &applied, baseline), i, r);
        }
        for (i, r) in p.spec.egress.iter().enumerate() {
            egress_rule(&mut g, cover, (p, &name, &applied, baseline), i, r);
        }
    }
    (g.ingress, g.egress)
}

/// The policy a rule is read in: the policy, its label, its targets, whether it is of the
/// baseline Tier.
type InPolicy<'a> = (&'a PolicyObject, &'a str, &'a [Target], bool);

/// Reads ingress rule `i` of a policy into `g`, or says why it cannot be enforced.
fn ingress_rule(
    g: &mut Gathered,
    cover: &mut Coverage,
    (p, name, applied, baseline): InPolicy,
    i: usize,
    r: &Parsed<PolicyRule>,
) {
    let what = format!("{name} ingress[{i}]");
    let Some(r) = g.read(cover, r, &what, name) else {
        return;
    };
    let within = p.namespace.as_deref();
    // Only the ClusterSet-scoped peers are Strait's to read (the rest, the policy engine's).
    let clusterset: Vec<&Peer> = r.from.iter().filter(|peer| peer.clusterset()).collect();
    let read = || -> Result<_, String> {
        let from = (!r.from.is_empty())
            .then(|| peers(&clusterset, within, &format!("{what} from")))
            .transpose()?;
        Ok((
            rule_targets(r, applied, within, &what)?,
            from,
            ports(r, &what)?,
        ))
    };
    let (applied_to, from, ports) = match read() {
        Ok(read) => read,
        Err(e) => return g.refuse(cover, e, name),
    };
    let rule = Rule {
        policy: (p.namespace.clone(), p.name.clone()),
        counter: g.counter(&what, r.action),
        action: action(r.action),
        baseline,
        applied_to,
        from,
        clusterset: !clusterset.is_empty(),
        ports,
    };
    let short = format!("ingress[{i}]");
    // No `from`: every source, those of other clusters decided here.
    if rule.clusterset || r.from.is_empty() {
        cover.enforced.push(short.clone());
    }
    if r.from.len() > clusterset.len() || r.from.is_empty() {
        cover.in_cluster.push(short);
    }
    g.ingress.push(rule);
}

/// Reads egress rule `i` of a policy into `g`: only its `toServices` of ClusterSet scope are
/// Strait's; the rest is the cluster's policy engine's.
fn egress_rule(
    g: &mut Gathered,
    cover: &mut Coverage,
    (p, name, applied, baseline): InPolicy,
    i: usize,
    r: &Parsed<PolicyRule>,
) {
    let what = format!("{name} egress[{i}]");
    let Some(r) = g.read(cover, r, &what, name) else {
        return;
    };
    let within = p.namespace.as_deref();
    let services: Vec<(String, String)> = r
        .to_services
        .iter()
        .filter(|s| s.clusterset())
        .filter_map(|s| {
            let name = s.name.as_deref()?;
            let ns = s.namespace.as_deref().or(within)?;
            Some((ns.to_owned(), name.to_owned()))
        })
        .collect();
    let short = format!("egress[{i}]");
    let peers = r.to.len() + r.to_services.len();
    if services.is_empty() || peers > services.len() {
        cover.in_cluster.push(short.clone());
    }
    if services.is_empty() {
        return;
    }
    let applied_to = match rule_targets(r, applied, within, &what) {
        Ok(a) => a,
        Err(e) => return g.refuse(cover, e, name),
    };
    cover.enforced.push(short);
    let rule = EgressRule {
        counter: g.counter(&what, r.action),
        action: action(r.action),
        baseline,
        applied_to,
        services,
    };
    g.egress.push(rule);
}

/// A skip reason without the policy's name (the condition is on the policy itself).
fn without_prefix(reason: &str, name: &str) -> String {
    reason
        .strip_prefix(name)
        .map_or(reason, str::trim_start)
        .to_owned()
}

fn label(p: &PolicyObject) -> String {
    match &p.namespace {
        Some(ns) => format!("AntreaNetworkPolicy {ns}/{}", p.name),
        None => format!("ClusterNetworkPolicy {}", p.name),
    }
}

/// The first verdict of `rules` (those of one Pod, in order) for a source and a port key.
fn verdict(
    rules: &[&Rule],
    ns_labels: &Labels,
    pod_labels: &Labels,
    (proto, port): (u8, u16),
) -> Option<PolicyVerdict> {
    let mut passed = false;
    for r in rules {
        if (passed && !r.baseline)
            || !r.takes(proto, port)
            || !r.source_matches(ns_labels, pod_labels)
        {
            continue;
        }
        match r.action {
            Action::Pass => passed = true,
            Action::Verdict(action) => {
                return Some(PolicyVerdict {
                    action,
                    rule: r.counter,
                });
            }
        }
    }
    None
}

/// Tier priorities by name: Antrea's default Tiers, and `tiers` (Tier objects) over them.
pub fn tier_priorities(tiers: &[(String, i32)]) -> BTreeMap<String, i32> {
    let mut out: BTreeMap<String, i32> = DEFAULT_TIERS
        .iter()
        .map(|(n, p, _)| ((*n).to_owned(), *p))
        .collect();
    out.extend(tiers.iter().cloned());
    out
}

/// What policies are compiled against.
#[derive(Clone, Copy, Debug)]
pub struct Cluster<'a> {
    pub tiers: &'a BTreeMap<String, i32>,
    /// Every Pod of the cluster, for ingress rules (the gateway's; empty elsewhere).
    pub pods: &'a [PodObject],
    /// This Node's Pods, for egress rules.
    pub node_pods: &'a [PodObject],
    pub namespace_labels: &'a BTreeMap<String, Labels>,
    /// The ClusterSet's label identities: normalized label -> ID.
    pub label_ids: &'a BTreeMap<String, u32>,
    /// The imported multi-cluster Services: (namespace, name) -> their ServiceImport's IPs.
    pub services: &'a BTreeMap<(String, String), Vec<Ipv4Addr>>,
    /// kube-proxy's mode on this Node, when it said (`crate::kube_proxy`).
    pub proxy_mode: Option<&'a ProxyMode>,
}

/// Compiles `policies`: ingress rules for every Pod of `cluster.pods` against the label
/// identities, egress `toServices` rules for this Node's Pods against the imported Services.
pub fn compile(policies: &[PolicyObject], cluster: &Cluster) -> Compiled {
    let mut out = Compiled {
        rules: vec!["no rule matched".into(), "no label identity".into()],
        ..Default::default()
    };
    let (rules, egress) = rules(
        policies,
        cluster.tiers,
        &mut out.rules,
        &mut out.skipped,
        &mut out.coverage,
    );
    compile_egress(&egress, cluster, &mut out);
    ingress(&rules, cluster, &mut out);
    if cluster.proxy_mode == Some(&ProxyMode::Ipvs) {
        ipvs_caveat(&mut out.coverage);
    }
    out
}

/// What kube-proxy's IPVS mode takes from the ingress rules Strait enforces: it picks a
/// ClusterIP's backend at netfilter's LOCAL_IN, after the gateway's policy program at
/// PREROUTING, which sees the ClusterIP and not the Pod: flows a remote cluster opens to a
/// `ClusterIP` export pass undecided. Flows to a Pod's address (`PodIP` exports, Pod-to-Pod)
/// are decided as ever. The condition says so, rule by rule: never `Enforced`.
fn ipvs_caveat(coverage: &mut BTreeMap<(Option<String>, String), Coverage>) {
    for cover in coverage.values_mut() {
        let ingress: Vec<String> = cover
            .enforced
            .iter()
            .filter(|r| r.starts_with("ingress["))
            .cloned()
            .collect();
        for rule in ingress {
            cover.not_enforced.push(format!(
                "{rule} on flows to a ClusterIP export (kube-proxy in IPVS mode picks the Pod \
                 after the gateway's policy hook; endpointIPType PodIP and Pod-to-Pod are enforced)"
            ));
        }
    }
}

/// This Node's Pods' flows to the imported Services that `toServices` rules name.
fn compile_egress(rules: &[EgressRule], cluster: &Cluster, out: &mut Compiled) {
    if rules.is_empty() {
        return;
    }
    let empty = Labels::new();
    for pod in cluster
        .node_pods
        .iter()
        .filter(|p| !p.host_network && !p.finished)
    {
        let ns_labels = cluster
            .namespace_labels
            .get(&pod.namespace)
            .unwrap_or(&empty);
        let own: Vec<&EgressRule> = rules
            .iter()
            .filter(|r| {
                r.applied_to
                    .iter()
                    .any(|t| t.matches(ns_labels, &pod.labels))
            })
            .collect();
        let named: BTreeSet<&(String, String)> = own.iter().flat_map(|r| &r.services).collect();
        for service in named {
            let Some(ips) = cluster.services.get(service) else {
                continue;
            };
            let mut passed = false;
            let mut verdict = None;
            for r in &own {
                if (passed && !r.baseline) || !r.services.contains(service) {
                    continue;
                }
                match r.action {
                    Action::Pass => passed = true,
                    Action::Verdict(action) => {
                        verdict = Some(PolicyVerdict {
                            action,
                            rule: r.counter,
                        });
                        break;
                    }
                }
            }
            let Some(verdict) = verdict else { continue };
            for src in pod.ips.iter().filter_map(|ip| ip.parse::<Ipv4Addr>().ok()) {
                for dst in ips {
                    out.egress.insert(
                        EgressKey {
                            src: src.octets(),
                            dst: dst.octets(),
                        },
                        verdict,
                    );
                }
            }
        }
    }
}

/// The Pods of the cluster that ClusterSet-scoped ingress rules cover, and their verdicts.
fn ingress(rules: &[Rule], cluster: &Cluster, out: &mut Compiled) {
    let (pods, namespace_labels, label_ids) =
        (cluster.pods, cluster.namespace_labels, cluster.label_ids);
    if !rules.iter().any(|r| r.clusterset) {
        return;
    }
    let identities: Vec<(u32, Labels, Labels)> = label_ids
        .iter()
        .filter_map(|(label, &id)| {
            let (ns, pod) = parse_normalized_label(label)?;
            Some((id, ns, pod))
        })
        .collect();
    let mut seen: BTreeMap<Ipv4Addr, &PodObject> = BTreeMap::new();
    for pod in pods.iter().filter(|p| !p.host_network && !p.finished) {
        let empty = Labels::new();
        let ns_labels = namespace_labels.get(&pod.namespace).unwrap_or(&empty);
        let own: Vec<&Rule> = rules
            .iter()
            .filter(|r| {
                r.applied_to
                    .iter()
                    .any(|t| t.matches(ns_labels, &pod.labels))
            })
            .collect();
        if !own.iter().any(|r| r.clusterset) {
            continue;
        }
        let mut keys: BTreeSet<(u8, u16)> = [(0, 0)].into();
        for r in &own {
            for &(proto, port) in &r.ports {
                keys.insert((proto, port));
                keys.insert((proto, 0));
            }
        }
        for ip in pod.ips.iter().filter_map(|ip| ip.parse::<Ipv4Addr>().ok()) {
            if let Some(other) = seen.insert(ip, pod) {
                out.skipped.push(format!(
                    "{ip}: claimed by Pods {}/{} and {}/{}",
                    other.namespace, other.name, pod.namespace, pod.name
                ));
                continue;
            }
            out.protected.insert(
                ip,
                PolicyVerdict {
                    action: ACTION_DROP,
                    rule: RULE_UNKNOWN_IDENTITY,
                },
            );
            let policies = own
                .iter()
                .filter(|r| r.clusterset)
                .map(|r| r.policy.clone());
            out.covering.insert(ip, policies.collect());
            for (id, id_ns, id_pod) in &identities {
                for &(proto, port) in &keys {
                    let v = verdict(&own, id_ns, id_pod, (proto, port));
                    // No match on the last resort key needs no entry (allowed, rule 0); on a
                    // narrower key it must say so, or the broader key's verdict would apply.
                    let v = match v {
                        None if (proto, port) == (0, 0) => continue,
                        None => PolicyVerdict {
                            action: ACTION_ALLOW,
                            rule: RULE_NO_MATCH,
                        },
                        Some(v) => v,
                    };
                    let key = PolicyKey {
                        pod: ip.octets(),
                        id: *id,
                        port,
                        proto,
                        _pad: 0,
                    };
                    out.entries.insert(key, v);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use mc_api::{labelidentity::normalized_label, selector::labels};
    use serde_json::{Value, json};

    fn ns(name: &str, extra: &[(&str, &str)]) -> Labels {
        let mut l = labels(extra);
        l.insert(NAMESPACE_NAME.into(), name.into());
        l
    }

    fn pod(namespace: &str, name: &str, ip: &str, l: &[(&str, &str)]) -> PodObject {
        PodObject {
            namespace: namespace.into(),
            name: name.into(),
            labels: labels(l),
            ips: vec![ip.into()],
            ..Default::default()
        }
    }

    fn policy(namespace: Option<&str>, name: &str, spec: Value) -> PolicyObject {
        PolicyObject {
            namespace: namespace.map(str::to_owned),
            name: name.into(),
            spec: serde_json::from_value(spec).unwrap(),
        }
    }

    /// The guide's `acnp-drop-tenant-to-secured-mc-service`, for `svc-ns/secured-service`.
    fn tenant_policy() -> PolicyObject {
        policy(
            None,
            "acnp-drop-tenant-to-secured-mc-service",
            json!({"priority": 1, "tier": "securityops",
                   "appliedTo": [{"podSelector": {"matchLabels": {"role": "tenant"}}}],
                   "egress": [{"action": "Drop", "toServices": [{"name": "secured-service",
                       "namespace": "svc-ns", "scope": "ClusterSet"}]}]}),
        )
    }

    struct World {
        pods: Vec<PodObject>,
        namespaces: BTreeMap<String, Labels>,
        ids: BTreeMap<String, u32>,
        services: BTreeMap<(String, String), Vec<Ipv4Addr>>,
    }

    /// This cluster: `admin` (role=admin) with Pod a 10.0.0.1, `prod-us-west` with db 10.0.0.2
    /// (app=db) and web 10.0.0.3 (app=web). Identities of the ClusterSet: 7 a tenant's Pod, 8 a
    /// client in prod-us-west, 9 app=other in prod-us-west, 10 a client in another Namespace.
    fn world() -> World {
        let namespaces: BTreeMap<String, Labels> = [
            ("admin".to_owned(), ns("admin", &[("role", "admin")])),
            ("prod-us-west".to_owned(), ns("prod-us-west", &[])),
        ]
        .into();
        let ids = [
            (
                normalized_label(&ns("t1", &[("role", "tenant")]), &labels(&[("x", "1")])),
                7,
            ),
            (
                normalized_label(&ns("prod-us-west", &[]), &labels(&[("app", "client")])),
                8,
            ),
            (
                normalized_label(&ns("prod-us-west", &[]), &labels(&[("app", "other")])),
                9,
            ),
            (
                normalized_label(&ns("elsewhere", &[]), &labels(&[("app", "client")])),
                10,
            ),
        ]
        .into();
        World {
            pods: vec![
                pod("admin", "a", "10.0.0.1", &[]),
                pod("prod-us-west", "db", "10.0.0.2", &[("app", "db")]),
                pod("prod-us-west", "web", "10.0.0.3", &[("app", "web")]),
            ],
            namespaces,
            ids,
            services: [
                (
                    ("svc-ns".to_owned(), "secured-service".to_owned()),
                    vec![Ipv4Addr::new(10, 96, 0, 50)],
                ),
                (
                    ("svc-ns".to_owned(), "open-service".to_owned()),
                    vec![Ipv4Addr::new(10, 96, 0, 51)],
                ),
            ]
            .into(),
        }
    }

    fn compile_in(w: &World, policies: &[PolicyObject]) -> Compiled {
        compile_under(w, policies, None)
    }

    fn compile_under(w: &World, policies: &[PolicyObject], mode: Option<&ProxyMode>) -> Compiled {
        compile(
            policies,
            &Cluster {
                tiers: &tier_priorities(&[]),
                pods: &w.pods,
                node_pods: &w.pods,
                namespace_labels: &w.namespaces,
                label_ids: &w.ids,
                services: &w.services,
                proxy_mode: mode,
            },
        )
    }

    /// Under kube-proxy's IPVS mode, which picks a ClusterIP's backend after the gateway's
    /// policy hook, a ClusterSet-scoped ingress rule is not enforced for ClusterIP exports: the
    /// condition never says `Enforced` for it, and names the rule and why. The same policy is
    /// `Enforced` under iptables and nftables (and when kube-proxy did not say); egress rules,
    /// decided by the Service's address before any DNAT, are enforced in every mode.
    #[test]
    fn under_ipvs_clusterset_ingress_rules_are_not_called_enforced() {
        let w = world();
        let admin = policy(
            None,
            "admin",
            json!({"priority": 1, "appliedTo": [{"podSelector": {}}],
                   "ingress": [{"action": "Drop", "from": [{"scope": "ClusterSet",
                       "namespaceSelector": {"matchLabels": {"role": "tenant"}}}]}]}),
        );
        let key = (None, "admin".to_owned());
        for mode in [None, Some(ProxyMode::Iptables), Some(ProxyMode::Nftables)] {
            let c = compile_under(&w, std::slice::from_ref(&admin), mode.as_ref());
            assert_eq!(c.coverage[&key].condition().1, "Enforced", "{mode:?}");
        }
        let c = compile_under(
            &w,
            &[admin.clone(), tenant_policy()],
            Some(&ProxyMode::Ipvs),
        );
        let (status, reason, message) = c.coverage[&key].condition();
        assert_eq!((status, reason), (false, "PartlyEnforced"));
        assert!(
            message.contains("not enforced: ingress[0] on flows to a ClusterIP export")
                && message.contains("IPVS"),
            "{message}"
        );
        // The rule is still compiled: Pod-to-Pod and PodIP exports are decided as ever.
        assert!(!c.protected.is_empty());
        let (status, reason, _) =
            c.coverage[&(None, "acnp-drop-tenant-to-secured-mc-service".to_owned())].condition();
        assert_eq!((status, reason), (true, "Enforced"));
    }

    fn get(c: &Compiled, ip: [u8; 4], id: u32, proto: u8, port: u16) -> Option<(u32, String)> {
        let key = |proto, port| PolicyKey {
            pod: ip,
            id,
            port,
            proto,
            _pad: 0,
        };
        let v = c
            .entries
            .get(&key(proto, port))
            .or_else(|| c.entries.get(&key(proto, 0)))
            .or_else(|| c.entries.get(&key(0, 0)))?;
        Some((v.action, c.rules[v.rule as usize].clone()))
    }

    /// The generation the gateway's remembered verdicts are checked against: the same for the
    /// same policy (an agent's restart keeps them), another for any change of what is decided.
    #[test]
    fn the_ingress_generation_changes_with_every_ingress_decision_and_only_then() {
        let w = world();
        let admin = |action: &str| {
            policy(
                None,
                "drop-tenant-access-to-admin-namespace",
                json!({"priority": 1, "tier": "securityops",
                       "appliedTo": [{"namespaceSelector": {"matchLabels": {"role": "admin"}}}],
                       "ingress": [{"action": action, "from": [{"scope": "ClusterSet",
                           "namespaceSelector": {"matchLabels": {"role": "tenant"}}}]}]}),
            )
        };
        let drop = compile_in(&w, &[admin("Drop")]).ingress_generation();
        assert_eq!(drop, compile_in(&w, &[admin("Drop")]).ingress_generation());
        assert_ne!(drop, compile_in(&w, &[admin("Allow")]).ingress_generation());
        assert_ne!(drop, compile_in(&w, &[]).ingress_generation());
        // Another Pod covered, the same rules.
        let mut more = world();
        more.pods.push(pod("admin", "b", "10.0.0.9", &[]));
        assert_ne!(
            drop,
            compile_in(&more, &[admin("Drop")]).ingress_generation()
        );
    }

    #[test]
    fn the_guides_admin_namespace_policy_drops_tenants_only() {
        let w = world();
        let c = compile_in(
            &w,
            &[policy(
                None,
                "drop-tenant-access-to-admin-namespace",
                json!({"priority": 1, "tier": "securityops",
                       "appliedTo": [{"namespaceSelector": {"matchLabels": {"role": "admin"}}}],
                       "ingress": [{"action": "Drop", "from": [{"scope": "ClusterSet",
                           "namespaceSelector": {"matchLabels": {"role": "tenant"}}}]}]}),
            )],
        );
        assert!(c.skipped.is_empty(), "{:?}", c.skipped);
        assert_eq!(
            c.protected.keys().collect::<Vec<_>>(),
            [&Ipv4Addr::new(10, 0, 0, 1)]
        );
        let admin = [10, 0, 0, 1];
        assert_eq!(
            get(&c, admin, 7, 6, 80),
            Some((
                ACTION_DROP,
                "ClusterNetworkPolicy drop-tenant-access-to-admin-namespace ingress[0] Drop".into()
            ))
        );
        // Others match no rule: no entry, allowed by the program (rule 0).
        assert_eq!(get(&c, admin, 8, 6, 80), None);
        assert_eq!(get(&c, [10, 0, 0, 2], 7, 6, 80), None);
    }

    #[test]
    fn the_guides_db_policy_allows_clients_of_its_namespace_and_drops_the_rest() {
        let w = world();
        let c = compile_in(
            &w,
            &[policy(
                Some("prod-us-west"),
                "db-svc-allow-ingress-from-client-only",
                json!({"priority": 1, "tier": "application",
                       "appliedTo": [{"podSelector": {"matchLabels": {"app": "db"}}}],
                       "ingress": [
                           {"action": "Allow", "from": [{"scope": "ClusterSet",
                               "podSelector": {"matchLabels": {"app": "client"}}}]},
                           {"action": "Drop"}]}),
            )],
        );
        assert!(c.skipped.is_empty(), "{:?}", c.skipped);
        let db = [10, 0, 0, 2];
        assert_eq!(get(&c, db, 8, 17, 53).map(|v| v.0), Some(ACTION_ALLOW));
        assert_eq!(get(&c, db, 9, 6, 80).map(|v| v.0), Some(ACTION_DROP));
        assert_eq!(get(&c, db, 10, 6, 80).map(|v| v.0), Some(ACTION_DROP));
        // web is not covered.
        assert!(!c.protected.contains_key(&Ipv4Addr::new(10, 0, 0, 3)));
    }

    #[test]
    fn pods_whose_rules_do_not_fit_the_map_refuse_every_remote_flow_and_the_condition_says_so() {
        let w = world();
        let all_pods = policy(
            None,
            "drop-from-everywhere",
            json!({"priority": 1, "tier": "application",
                   "appliedTo": [{"podSelector": {}}],
                   "ingress": [{"action": "Drop", "from": [{"scope": "ClusterSet",
                       "podSelector": {}}]}]}),
        );
        let whole = compile_in(&w, std::slice::from_ref(&all_pods));
        let per_pod = |c: &Compiled, pod: Ipv4Addr| {
            c.entries.keys().filter(|k| k.pod == pod.octets()).count()
        };
        let pods: Vec<Ipv4Addr> = whole.protected.keys().copied().collect();
        assert!(pods.len() >= 2, "{pods:?}");
        // Room for every entry: nothing changes.
        let mut same = whole.clone();
        same.fit(whole.entries.len());
        assert_eq!(same, whole);
        // Room for the first Pod's entries only.
        let mut c = whole.clone();
        let room = per_pod(&whole, pods[0]);
        c.fit(room);
        assert_eq!(c.entries.len(), room);
        assert_ne!(c.protected[&pods[0]].action, ACTION_REFUSE_ALL);
        for pod in &pods[1..] {
            assert_eq!(c.protected[pod].action, ACTION_REFUSE_ALL, "{pod}");
            assert_eq!(per_pod(&c, *pod), 0);
        }
        let cover = &c.coverage[&(None, "drop-from-everywhere".to_owned())];
        assert!(
            cover
                .not_enforced
                .iter()
                .any(|n| n.contains("policy map holds") && n.contains(&pods[1].to_string())),
            "{cover:?}"
        );
        assert!(
            c.skipped
                .iter()
                .any(|s| s.contains("refuse every remote flow"))
        );
        assert_ne!(c.ingress_generation(), whole.ingress_generation());
    }

    #[test]
    fn order_is_tier_then_priority_then_rule_and_pass_goes_to_baseline() {
        let w = world();
        let drop_all = |name: &str, tier: &str, priority: f64| {
            policy(
                None,
                name,
                json!({"priority": priority, "tier": tier,
                       "appliedTo": [{"podSelector": {}}],
                       "ingress": [{"action": "Drop", "from": [{"scope": "ClusterSet",
                           "podSelector": {}}]}]}),
            )
        };
        let allow_all = |name: &str, tier: &str, priority: f64, action: &str| {
            policy(
                None,
                name,
                json!({"priority": priority, "tier": tier,
                       "appliedTo": [{"podSelector": {}}],
                       "ingress": [{"action": action, "from": [{"scope": "ClusterSet",
                           "namespaceSelector": {}}]}]}),
            )
        };
        let a = [10, 0, 0, 1];
        // securityops (100) before application (250), whatever the priorities.
        let c = compile_in(
            &w,
            &[
                drop_all("d", "application", 1.0),
                allow_all("a", "securityops", 9.0, "Allow"),
            ],
        );
        assert_eq!(get(&c, a, 7, 6, 1).map(|v| v.0), Some(ACTION_ALLOW));
        // Same Tier: the lower priority first.
        let c = compile_in(
            &w,
            &[
                drop_all("d", "application", 1.0),
                allow_all("a", "application", 2.0, "Allow"),
            ],
        );
        assert_eq!(get(&c, a, 7, 6, 1).map(|v| v.0), Some(ACTION_DROP));
        // Pass skips the rest of the non-baseline Tiers, baseline still applies.
        let c = compile_in(
            &w,
            &[
                allow_all("p", "securityops", 1.0, "Pass"),
                drop_all("d", "application", 1.0),
            ],
        );
        assert_eq!(get(&c, a, 7, 6, 1), None);
        let c = compile_in(
            &w,
            &[
                allow_all("p", "securityops", 1.0, "Pass"),
                drop_all("d", "application", 1.0),
                drop_all("b", "baseline", 1.0),
            ],
        );
        assert_eq!(
            get(&c, a, 7, 6, 1),
            Some((ACTION_DROP, "ClusterNetworkPolicy b ingress[0] Drop".into()))
        );
    }

    #[test]
    fn ports_get_entries_of_their_own_and_the_rest_the_broader_verdicts() {
        let w = world();
        let c = compile_in(
            &w,
            &[policy(
                None,
                "p",
                json!({"priority": 1, "appliedTo": [{"podSelector": {"matchLabels": {"app": "db"}}}],
                       "ingress": [
                           {"action": "Allow", "ports": [{"protocol": "TCP", "port": 5432}],
                            "from": [{"scope": "ClusterSet", "podSelector": {}}]},
                           {"action": "Reject", "ports": [{"protocol": "UDP"}],
                            "from": [{"scope": "ClusterSet", "podSelector": {}}]},
                           {"action": "Drop", "from": [{"scope": "ClusterSet", "podSelector": {}}]}]}),
            )],
        );
        let db = [10, 0, 0, 2];
        assert_eq!(get(&c, db, 7, 6, 5432).map(|v| v.0), Some(ACTION_ALLOW));
        assert_eq!(get(&c, db, 7, 6, 5433).map(|v| v.0), Some(ACTION_DROP));
        assert_eq!(get(&c, db, 7, 17, 5432).map(|v| v.0), Some(ACTION_REJECT));
        assert_eq!(get(&c, db, 7, 1, 0).map(|v| v.0), Some(ACTION_DROP));
    }

    #[test]
    fn rules_without_clusterset_peers_protect_nothing_and_bad_rules_are_skipped() {
        let w = world();
        // Seed 000's in-cluster isolation: not the gateway's to enforce.
        let c = compile_in(
            &w,
            &[policy(
                None,
                "strict-namespace-isolation",
                json!({"priority": 1, "tier": "securityops",
                       "appliedTo": [{"namespaceSelector": {}}],
                       "ingress": [{"action": "Pass", "from": [{"namespaces": {"match": "Self"}}]},
                                   {"action": "Drop", "from": [{"namespaceSelector": {}}]}]}),
            )],
        );
        assert!(c.protected.is_empty() && c.entries.is_empty());
        let cover = &c.coverage[&(None, "strict-namespace-isolation".to_owned())];
        let (status, reason, message) = cover.condition();
        assert_eq!((status, reason), (false, "NotEnforced"));
        assert_eq!(
            message,
            "in-cluster peers (ingress[0], ingress[1]) need a policy engine in the cluster, such as Antrea"
        );
        let c = compile_in(
            &w,
            &[
                policy(
                    None,
                    "named",
                    json!({"priority": 1, "appliedTo": [{"podSelector": {}}],
                           "ingress": [{"action": "Drop", "ports": [{"port": "http"}],
                                        "from": [{"scope": "ClusterSet", "podSelector": {}}]}]}),
                ),
                policy(
                    None,
                    "tierless",
                    json!({"priority": 1, "tier": "nope", "appliedTo": [{"podSelector": {}}],
                           "ingress": [{"action": "Drop", "from": [{"scope": "ClusterSet", "podSelector": {}}]}]}),
                ),
            ],
        );
        assert_eq!(c.skipped.len(), 2, "{:?}", c.skipped);
        assert!(c.skipped[0].contains("Tier nope"), "{:?}", c.skipped);
        assert!(c.skipped[1].contains("named port"), "{:?}", c.skipped);
        assert!(c.protected.is_empty());
        let (_, reason, message) = c.coverage[&(None, "named".to_owned())].condition();
        assert_eq!(reason, "NotEnforced");
        assert!(
            message.starts_with("not enforced: ingress[0].ports[0]: named port"),
            "{message}"
        );
        let (_, reason, message) = c.coverage[&(None, "tierless".to_owned())].condition();
        assert_eq!(reason, "NotEnforced");
        assert_eq!(
            message,
            "not enforced: every rule (Tier nope does not exist)"
        );
        // A rule that cannot be read (a label value that is not a string) is refused alone,
        // naming why; the policy's other rule is enforced.
        let c = compile_in(
            &w,
            &[policy(
                None,
                "half-bad",
                json!({"priority": 1, "appliedTo": [{"podSelector": {}}],
                       "ingress": [{"action": "Drop", "from": [{"scope": "ClusterSet", "podSelector": {"matchLabels": {"app": 1}}}]},
                                   {"action": "Drop", "from": [{"scope": "ClusterSet", "podSelector": {}}]}]}),
            )],
        );
        let (_, reason, message) = c.coverage[&(None, "half-bad".to_owned())].condition();
        assert_eq!(reason, "PartlyEnforced", "{message}");
        assert!(
            message.contains("ingress[0] from[0]: matchLabels.app must be a string"),
            "{message}"
        );
        assert!(!c.protected.is_empty());
        // What the cluster's policy engine reads is not Strait's to refuse (an in-cluster peer's
        // selector); a list written `null` is an absent one; a port written `null` is unreadable.
        let c = compile_in(
            &w,
            &[policy(
                None,
                "lenient",
                json!({"priority": 1, "appliedTo": [{"podSelector": {}}],
                       "ingress": [{"action": "Drop", "from": [{"podSelector": null}, {"scope": "ClusterSet", "podSelector": {}}]},
                                   {"action": "Drop", "from": null, "ports": null},
                                   {"action": "Drop", "ports": [{"port": null}]}]}),
            )],
        );
        let cover = &c.coverage[&(None, "lenient".to_owned())];
        assert_eq!(cover.enforced, ["ingress[0]", "ingress[1]"], "{cover:?}");
        assert_eq!(cover.not_enforced.len(), 1, "{cover:?}");
        assert!(
            cover.not_enforced[0].starts_with("ingress[2].ports[0]: port "),
            "{cover:?}"
        );
    }

    #[test]
    fn the_condition_says_which_rules_strait_enforces() {
        let w = world();
        let c = compile_in(
            &w,
            &[
                tenant_policy(),
                policy(
                    Some("prod-us-west"),
                    "mixed",
                    json!({"priority": 1, "appliedTo": [{"podSelector": {}}],
                           "ingress": [
                               {"action": "Allow", "from": [{"scope": "ClusterSet",
                                   "podSelector": {"matchLabels": {"app": "client"}}}]},
                               {"action": "Drop", "from": [{"podSelector": {}}]},
                               {"action": "Drop"}],
                           "egress": [{"action": "Drop", "to": [{"podSelector": {}}]}]}),
                ),
            ],
        );
        let (status, reason, message) =
            c.coverage[&(None, "acnp-drop-tenant-to-secured-mc-service".to_owned())].condition();
        assert_eq!((status, reason), (true, "Enforced"));
        assert_eq!(
            message,
            "Strait enforces egress[0] on traffic between clusters"
        );
        let (status, reason, message) =
            c.coverage[&(Some("prod-us-west".to_owned()), "mixed".to_owned())].condition();
        assert_eq!((status, reason), (false, "PartlyEnforced"));
        assert_eq!(
            message,
            "Strait enforces ingress[0], ingress[2] on traffic between clusters; in-cluster peers \
             (ingress[1], ingress[2], egress[0]) need a policy engine in the cluster, such as Antrea"
        );
    }

    #[test]
    fn the_guides_tenant_policy_drops_tenants_flows_to_the_secured_service_only() {
        let mut w = world();
        w.pods
            .push(pod("t1", "tenant", "10.0.0.9", &[("role", "tenant")]));
        let c = compile_in(&w, &[tenant_policy()]);
        assert!(c.skipped.is_empty(), "{:?}", c.skipped);
        let key = EgressKey {
            src: [10, 0, 0, 9],
            dst: [10, 96, 0, 50],
        };
        let v = c
            .egress
            .get(&key)
            .expect("the tenant's flows to the secured Service");
        assert_eq!(v.action, ACTION_DROP);
        assert_eq!(
            c.rules[v.rule as usize],
            "ClusterNetworkPolicy acnp-drop-tenant-to-secured-mc-service egress[0] Drop"
        );
        // Nothing else: other Pods, other Services; no ingress protection either.
        assert_eq!(c.egress.len(), 1, "{:?}", c.egress);
        assert!(c.protected.is_empty());
    }
}
