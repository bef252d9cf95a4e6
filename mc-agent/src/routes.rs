//! Kernel routes for the remote prefixes: packets only meet the uplink's egress hook if the kernel
//! routes them to the uplink, so every remote prefix gets a route via the uplink's next hop toward
//! the remote gateways (docs/design.md §4). Strait's routes are in the main table with a protocol
//! number and a metric of their own: a sync never replaces or removes a route it did not create,
//! a route of someone else's for the same prefix (a lower metric) or for a part of it (a longer
//! prefix) wins over Strait's, and says so. No `ip rule`: any rule beyond the kernel's own takes
//! every route lookup of the Node off its fast path (the local and main tables are then looked up
//! one after the other, through the rules); measured, 8% fewer 64-byte packets across the
//! clusters (docs/benchmarks.md, 2026-12-02). An earlier version's table 167 and its rule are
//! removed.

use std::{
    collections::{BTreeSet, HashMap},
    net::Ipv4Addr,
    process::Command,
};

use mc_api::net::Prefix;
use serde::Deserialize;

/// `proto` of Strait's routes (`ip route show table all proto 167`).
pub const ROUTE_PROTO: &str = "167";
/// The metric of Strait's routes: above those other software makes (connected routes 0, a CNI's
/// or an operator's usually 0 to 1024), so that theirs win for the same prefix.
pub const ROUTE_METRIC: u32 = 1167;
/// The table an earlier version put Strait's routes in, and the priority of its rule.
pub const OLD_TABLE: &str = "167";
pub const OLD_RULE_PREF: &str = "32000";

#[derive(Debug, Deserialize)]
struct RuleJson {
    #[serde(default)]
    table: Option<String>,
}

/// Removes the rule an earlier version made (first sync, uninstall); whether it was there.
pub fn remove_rule() -> Result<bool, RouteError> {
    let mut removed = false;
    while ip(&[
        "-4",
        "rule",
        "del",
        "pref",
        OLD_RULE_PREF,
        "lookup",
        OLD_TABLE,
    ])
    .is_ok()
    {
        removed = true;
    }
    Ok(removed)
}

/// Whether an earlier version's rule is in place.
pub fn has_rule() -> Result<bool, RouteError> {
    Ok(
        ip_json::<RuleJson>(&["-4", "rule", "show", "pref", OLD_RULE_PREF])?
            .iter()
            .any(|r| r.table.as_deref() == Some(OLD_TABLE)),
    )
}

#[derive(Debug, thiserror::Error)]
#[error("{command}: {message}")]
pub struct RouteError {
    command: String,
    message: String,
}

#[derive(Debug, Deserialize)]
struct RouteJson {
    #[serde(default)]
    dst: Option<String>,
    #[serde(default)]
    gateway: Option<String>,
    #[serde(default)]
    dev: Option<String>,
    #[serde(default)]
    protocol: Option<String>,
    /// Absent for metric 0.
    #[serde(default)]
    metric: Option<u32>,
}

impl RouteJson {
    fn ours(&self) -> bool {
        self.protocol.as_deref() == Some(ROUTE_PROTO)
    }

    fn prefix(&self) -> Option<Prefix> {
        let dst = self.dst.as_deref()?;
        Prefix::parse(dst)
            .or_else(|_| Prefix::parse(&format!("{dst}/32")))
            .ok()
    }

    fn describe(&self) -> String {
        let mut s = self.dst.clone().unwrap_or_default();
        for (word, value) in [
            ("via", &self.gateway),
            ("dev", &self.dev),
            ("proto", &self.protocol),
        ] {
            if let Some(v) = value {
                s.push_str(&format!(" {word} {v}"));
            }
        }
        s.push_str(&format!(" metric {}", self.metric.unwrap_or(0)));
        s
    }
}

fn ip_json<T: serde::de::DeserializeOwned>(args: &[&str]) -> Result<Vec<T>, RouteError> {
    let out = ip(&[&["-j"], args].concat())?;
    if out.trim().is_empty() {
        return Ok(Vec::new());
    }
    serde_json::from_str(&out).map_err(|e| RouteError {
        command: format!("ip -j {}", args.join(" ")),
        message: format!("unexpected output: {e}"),
    })
}

fn ip(args: &[&str]) -> Result<String, RouteError> {
    let command = format!("ip {}", args.join(" "));
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| RouteError {
            command: command.clone(),
            message: format!("cannot run ip (iproute2 must be installed): {e}"),
        })?;
    if !out.status.success() {
        return Err(RouteError {
            command,
            message: String::from_utf8_lossy(&out.stderr).trim().to_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What one route sync did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteReport {
    pub added: Vec<Prefix>,
    pub removed: Vec<String>,
    /// Prefixes routed elsewhere, all or in part, by a route Strait did not make (the same
    /// prefix with a lower metric, or a longer one inside it), each with that route; and those
    /// not routed at all because such a route has Strait's own metric.
    pub shadowed: Vec<String>,
    /// The prefixes whose every address Strait's route carries (none of them [`shadowed`]):
    /// only for these may a Node's egress keep the Ethernet header the kernel built.
    ///
    /// [`shadowed`]: RouteReport::shadowed
    pub routed: BTreeSet<Prefix>,
}

/// Makes Strait's routes equal to `prefixes`, each via the next hop the kernel uses toward
/// `toward` (the local gateway on a regular Node, a remote gateway on the gateway) on `uplink`,
/// or via `toward` itself when it is on the uplink's link. With no prefixes, only removes.
pub fn sync(
    uplink: &str,
    prefixes: &BTreeSet<Prefix>,
    toward: Option<Ipv4Addr>,
) -> Result<RouteReport, RouteError> {
    let mut report = RouteReport::default();
    migrate()?;
    let main = ip_json::<RouteJson>(&["-4", "route", "show", "table", "main"])?;
    let (ours, theirs): (Vec<RouteJson>, Vec<RouteJson>) =
        main.into_iter().partition(RouteJson::ours);
    let table = MainTable::new(ours, theirs);
    if let Some(toward) = toward.filter(|_| !prefixes.is_empty()) {
        let target = toward.to_string();
        let hop = next_hop(uplink, &target)?;
        let via = hop.gateway.as_deref().unwrap_or(&target);
        for prefix in prefixes {
            route_prefix(uplink, prefix, via, &table, &mut report)?;
        }
    }
    remove_stale(&table.ours, prefixes, toward, &mut report)?;
    Ok(report)
}

/// The main table's IPv4 routes as a sync found them: Strait's (its protocol) and the others'.
struct MainTable {
    ours: Vec<RouteJson>,
    theirs: Vec<RouteJson>,
    /// Strait's routes with its metric, by prefix (each parsed once: with hundreds of remote
    /// clusters, a sync looks every prefix up here).
    in_place: HashMap<Prefix, usize>,
}

impl MainTable {
    fn new(ours: Vec<RouteJson>, theirs: Vec<RouteJson>) -> Self {
        let in_place = ours
            .iter()
            .enumerate()
            .filter(|(_, r)| r.metric == Some(ROUTE_METRIC))
            .filter_map(|(i, r)| Some((r.prefix()?, i)))
            .collect();
        Self {
            ours,
            theirs,
            in_place,
        }
    }

    /// Strait's route for `prefix` with its metric, if there is one.
    fn ours_for(&self, prefix: &Prefix) -> Option<&RouteJson> {
        self.in_place.get(prefix).map(|i| &self.ours[*i])
    }
}

/// The kernel's route toward `target` (a gateway's address); warns when it does not leave
/// through the uplink (the remote prefixes are routed through the uplink anyway).
fn next_hop(uplink: &str, target: &str) -> Result<RouteJson, RouteError> {
    let hop = ip_json::<RouteJson>(&["route", "get", target])?
        .into_iter()
        .next()
        .ok_or_else(|| RouteError {
            command: format!("ip route get {target}"),
            message: "no route to the remote gateway".into(),
        })?;
    if hop.dev.as_deref() != Some(uplink) {
        tracing::warn!(
            uplink,
            gateway = %target,
            dev = hop.dev.as_deref().unwrap_or("?"),
            "the route to the remote gateway does not leave through the uplink; routing remote prefixes through the uplink anyway"
        );
    }
    Ok(hop)
}

/// Strait's route for one prefix, via `via` on `uplink`: reported as routed when it carries
/// the prefix whole, added or moved (`replace`) unless a route of theirs has Strait's metric.
fn route_prefix(
    uplink: &str,
    prefix: &Prefix,
    via: &str,
    table: &MainTable,
    report: &mut RouteReport,
) -> Result<(), RouteError> {
    let contest = contest(prefix, table);
    report.shadowed.extend(contest.shadowed);
    if contest.wholly {
        report.routed.insert(*prefix);
    }
    if contest.same_metric {
        return Ok(());
    }
    let dst = prefix.to_string();
    let metric = ROUTE_METRIC.to_string();
    // `replace` also moves an existing route of Strait's to a new next hop.
    let args = [
        "-4",
        "route",
        "replace",
        dst.as_str(),
        "via",
        via,
        "dev",
        uplink,
        "proto",
        ROUTE_PROTO,
        "metric",
        metric.as_str(),
        "table",
        "main",
    ];
    let existing = table.ours_for(prefix);
    if existing
        .is_some_and(|r| r.gateway.as_deref() == Some(via) && r.dev.as_deref() == Some(uplink))
    {
        // In place already: no `ip` run per unchanged prefix (with 500 remote clusters, a
        // thousand of them took a pass 1.6 s).
        return Ok(());
    }
    ip(&args)?;
    if existing.is_none() {
        report.added.push(*prefix);
    }
    Ok(())
}

/// How the routes of others bear on Strait's route for one prefix.
#[derive(Debug, Default, PartialEq)]
struct Contest {
    /// A route of theirs for the same prefix has Strait's metric: `replace` could take it, so
    /// Strait adds none beside it.
    same_metric: bool,
    /// Strait's route carries every address of the prefix.
    wholly: bool,
    /// Each route of theirs that wins over Strait's (in part), or keeps it from being added.
    shadowed: Vec<String>,
}

/// Weighs the routes of others inside `prefix` against Strait's: the same prefix with a lower
/// metric wins, with a higher one loses; a longer one inside it wins for its part; one with
/// Strait's metric keeps Strait's from being added (one of Strait's already there, first, so
/// carrying the traffic, is left as it is).
fn contest(prefix: &Prefix, table: &MainTable) -> Contest {
    let theirs = |r: &&RouteJson| r.prefix().is_some_and(|p| prefix.contains(&p));
    let ours_in_place = table.ours_for(prefix).is_some();
    let mut out = Contest {
        wholly: true,
        ..Default::default()
    };
    for other in table.theirs.iter().filter(theirs) {
        let same = other.prefix() == Some(*prefix);
        let metric = other.metric.unwrap_or(0);
        if same && metric == ROUTE_METRIC {
            out.same_metric = true;
            if !ours_in_place {
                out.wholly = false;
                out.shadowed.push(format!(
                    "{prefix} is not routed: the route {} has Strait's metric",
                    other.describe()
                ));
            }
        } else if same && metric > ROUTE_METRIC {
            // A higher metric: Strait's route wins; theirs stays.
        } else {
            out.wholly = false;
            out.shadowed.push(format!(
                "{prefix}: the route {} wins over Strait's for {}",
                other.describe(),
                other.dst.as_deref().unwrap_or("?")
            ));
        }
    }
    out
}

/// Removes Strait's routes that are not wanted: a prefix not in `prefixes`, any with no
/// `toward`, or one with another metric than Strait's.
fn remove_stale(
    ours: &[RouteJson],
    prefixes: &BTreeSet<Prefix>,
    toward: Option<Ipv4Addr>,
    report: &mut RouteReport,
) -> Result<(), RouteError> {
    for route in ours {
        let wanted = route.prefix().is_some_and(|p| prefixes.contains(&p))
            && toward.is_some()
            && route.metric == Some(ROUTE_METRIC);
        if wanted {
            continue;
        }
        let (Some(dst), metric) = (route.dst.as_deref(), route.metric.unwrap_or(0).to_string())
        else {
            continue;
        };
        ip(&[
            "-4",
            "route",
            "del",
            dst,
            "proto",
            ROUTE_PROTO,
            "metric",
            &metric,
            "table",
            "main",
        ])?;
        report.removed.push(dst.to_owned());
    }
    Ok(())
}

/// Takes away what an earlier version made: its routes in table 167 and the rule that looked
/// the table up.
fn migrate() -> Result<(), RouteError> {
    remove_rule()?;
    let old = ip_json::<RouteJson>(&[
        "-4",
        "route",
        "show",
        "table",
        OLD_TABLE,
        "proto",
        ROUTE_PROTO,
    ])
    .or_else(|e| {
        if e.message.contains("table does not exist") {
            Ok(Vec::new())
        } else {
            Err(e)
        }
    })?;
    if !old.is_empty() {
        ip(&[
            "-4",
            "route",
            "flush",
            "table",
            OLD_TABLE,
            "proto",
            ROUTE_PROTO,
        ])?;
        tracing::info!(
            routes = ?old.iter().filter_map(|r| r.dst.clone()).collect::<Vec<_>>(),
            "moved Strait's routes from table 167 (an earlier version's, with its rule) to the main table"
        );
    }
    Ok(())
}

/// The IPv4 subnets of `dev`'s addresses (address and netmask), as the kernel has them now.
pub fn subnets_of(dev: &str) -> Vec<Prefix> {
    let Ok(addrs) = nix::ifaddrs::getifaddrs() else {
        return Vec::new();
    };
    let mut out: Vec<Prefix> = addrs
        .filter(|ifa| ifa.interface_name == dev)
        .filter_map(|ifa| {
            let addr = ifa.address?.as_sockaddr_in()?.ip();
            let mask = ifa.netmask?.as_sockaddr_in()?.ip();
            Some(Prefix::new(addr, u32::from(mask).count_ones() as u8))
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The interface that holds `addr` (the Node's InternalIP): the default uplink.
pub fn interface_with_address(addr: Ipv4Addr) -> Option<String> {
    let addrs = nix::ifaddrs::getifaddrs().ok()?;
    for ifa in addrs {
        let Some(sock) = ifa.address else { continue };
        if let Some(sin) = sock.as_sockaddr_in()
            && sin.ip() == addr
        {
            return Some(ifa.interface_name);
        }
    }
    None
}

#[derive(Debug, Deserialize)]
struct LinkJson {
    #[serde(default)]
    link_netnsid: Option<i64>,
    #[serde(default)]
    linkinfo: Option<LinkInfoJson>,
}

#[derive(Debug, Deserialize)]
struct LinkInfoJson {
    #[serde(default)]
    info_kind: Option<String>,
}

/// Whether `uplink` is one end of a veth pair whose other end is in another network namespace
/// (`ip -d link show`: kind `veth` with a `link_netnsid`): the case where the gateway's hairpin
/// can hand packets straight to that end ([`mc_common::dataplane::CONFIG_UPLINK_PEER`]). Not a
/// netkit device: handing a packet to its peer would skip the program its owner attached there,
/// and in L3 mode it has no Ethernet header.
pub fn uplink_has_peer_elsewhere(uplink: &str) -> Result<bool, RouteError> {
    let (kind, elsewhere) = link_kind(uplink)?;
    Ok(kind.as_deref() == Some("veth") && elsewhere)
}

/// A device's kind as `ip -d link show` names it (`veth`, `bridge`, `bond`, ...; `None` for a
/// plain device such as a NIC), and whether it is linked to another network namespace (a
/// veth's other end there).
pub fn link_kind(dev: &str) -> Result<(Option<String>, bool), RouteError> {
    let links = ip_json::<LinkJson>(&["-d", "link", "show", "dev", dev])?;
    Ok(links
        .into_iter()
        .next()
        .map(|l| {
            let elsewhere = l.link_netnsid.is_some();
            (l.linkinfo.and_then(|i| i.info_kind), elsewhere)
        })
        .unwrap_or_default())
}

/// Strait's routes in every table (`ip route show table all proto 167`).
pub fn own() -> Result<Vec<String>, RouteError> {
    Ok(
        ip_json::<RouteJson>(&["-4", "route", "show", "table", "all", "proto", ROUTE_PROTO])?
            .into_iter()
            .filter_map(|r| r.dst)
            .collect(),
    )
}

/// Removes Strait's routes from every table, returning those it found.
pub fn flush_own() -> Result<Vec<String>, RouteError> {
    let found = own()?;
    if !found.is_empty() {
        ip(&["-4", "route", "flush", "table", "all", "proto", ROUTE_PROTO])?;
    }
    Ok(found)
}

/// An interface's MTU (`SIOCGIFMTU` on a socket of this network namespace).
pub fn interface_mtu(name: &str) -> std::io::Result<u32> {
    let data = ifreq(name, libc::SIOCGIFMTU)?;
    Ok(i32::from_ne_bytes([data[0], data[1], data[2], data[3]]) as u32)
}

/// An interface's MAC address (`SIOCGIFHWADDR`, this network namespace).
pub fn mac_address(name: &str) -> std::io::Result<[u8; 6]> {
    let data = ifreq(name, libc::SIOCGIFHWADDR)?;
    // A `struct sockaddr`: the family (2 bytes), then the address.
    let mut mac = [0u8; 6];
    mac.copy_from_slice(&data[2..8]);
    Ok(mac)
}

/// One `struct ifreq` ioctl on a socket of this network namespace: the 24 bytes of the union
/// that follows the name, as the kernel wrote them.
fn ifreq(name: &str, request: libc::c_ulong) -> std::io::Result<[u8; 24]> {
    use std::os::fd::{AsRawFd as _, FromRawFd as _, OwnedFd};
    #[repr(C)]
    struct IfReq {
        name: [libc::c_char; libc::IFNAMSIZ],
        data: [u8; 24],
    }
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("{name:?} is not an interface name"),
        ));
    }
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: [0; 24],
    };
    for (dst, src) in req.name.iter_mut().zip(name.bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: plain socket(2); the descriptor is owned right away.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fd is a new, valid descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: the request reads the name and writes within the union that follows it in `req`,
    // which is as large as a struct ifreq.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request, &mut req) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(req.data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_mtu_comes_from_this_namespace() {
        // Loopback's MTU is 65536 in every network namespace.
        assert_eq!(interface_mtu("lo").unwrap(), 65536);
        assert!(interface_mtu("no-such-if0").is_err());
        assert!(interface_mtu("a-name-longer-than-ifnamsiz").is_err());
        // Loopback's address is all zero; an unknown device has none.
        assert_eq!(mac_address("lo").unwrap(), [0; 6]);
        assert!(mac_address("no-such-if0").is_err());
    }
}
