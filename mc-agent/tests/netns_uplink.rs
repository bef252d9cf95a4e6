//! The agent binary attaches to a veth in a fresh network namespace: real packets cross, counters
//! move, a second start reuses the pinned maps and links, and bpftool prints named fields.
//! Run as root.

mod support;

use std::{path::Path, process::Command};

use serde_json::Value;
use support::{
    Bpffs, NetNs, agent, agent_bin, daemonset_caps, in_netns, lacks_root, run, setpriv_only,
};

/// Why the tests here need root (said when they are skipped without it).
const WHY_ROOT: &str = "loads eBPF programs and creates network namespaces";

/// Packets of one counter, from `mc-agent counters --json`.
fn agent_packets(pin_root: &Path, name: &str) -> u64 {
    let out = run(Command::new(agent_bin())
        .arg("--pin-root")
        .arg(pin_root)
        .args(["counters", "--json"]));
    let readings: Value = serde_json::from_slice(&out.stdout).expect("counters JSON");
    readings
        .as_array()
        .expect("array")
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("counter {name} missing"))["packets"]
        .as_u64()
        .expect("packets")
}

/// `bpftool -j link show pinned PATH` -> (link id, program id).
fn link_ids(path: &Path) -> (u64, u64) {
    let out = run(Command::new("bpftool")
        .args(["-j", "link", "show", "pinned"])
        .arg(path));
    let v: Value = serde_json::from_slice(&out.stdout).expect("bpftool link JSON");
    (
        v["id"].as_u64().expect("link id"),
        v["prog_id"].as_u64().expect("prog id"),
    )
}

/// A veth pair, `a_dev` in `a` and `b_dev` in `b`.
fn veth_pair(a: &NetNs, a_dev: &str, b: &NetNs, b_dev: &str) {
    run(Command::new("ip").args([
        "link", "add", a_dev, "netns", &a.name, "type", "veth", "peer", b_dev, "netns", &b.name,
    ]));
}

/// Two namespaces `<prefix>-a` and `<prefix>-b` joined by a veth, `va` (address `a_ip`/30) in
/// the first and `vb` (`b_ip`/30) in the second, both up.
fn linked(prefix: &str, a_ip: &str, b_ip: &str) -> (NetNs, NetNs) {
    let a = NetNs::new(&format!("{prefix}-a"));
    let b = NetNs::new(&format!("{prefix}-b"));
    veth_pair(&a, "va", &b, "vb");
    ip_in(
        &a,
        &[&format!("addr add {a_ip}/30 dev va"), "link set va up"],
    );
    ip_in(
        &b,
        &[&format!("addr add {b_ip}/30 dev vb"), "link set vb up"],
    );
    (a, b)
}

/// Runs each `ip` command line (its arguments, space-separated) in `ns`.
fn ip_in(ns: &NetNs, lines: &[&str]) {
    for line in lines {
        run(Command::new("ip")
            .args(["-n", &ns.name])
            .args(line.split(' ')));
    }
}

fn ping(ns: &NetNs, dst: &str, count: u32) {
    run(ns
        .cmd("ping")
        .args(["-c", &count.to_string(), "-i", "0.05", "-W", "1", dst]));
}

#[test]
fn traffic_moves_counters_and_a_restart_reuses_the_pins() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let (a, _b) = linked("mc-uplink", "198.18.250.1", "198.18.250.2");
    let fs = Bpffs::new("netns-uplink");
    let pin_root = fs.pin_root();

    let log = agent(&a, &pin_root, &["attach", "--uplink", "va"]);
    assert!(log.contains("attached with TCX"), "first start log: {log}");
    let ingress = pin_root.join("links/va_ingress");
    let egress = pin_root.join("links/va_egress");
    let (ingress_link, ingress_prog) = link_ids(&ingress);
    let (egress_link, _) = link_ids(&egress);

    ping(&a, "198.18.250.2", 5);
    let after_first = agent_packets(&pin_root, "pass_ipv4");
    // 5 echo requests leave through egress, 5 replies come in through ingress.
    assert!(
        after_first >= 10,
        "expected >= 10 IPv4 packets counted, got {after_first}"
    );

    // Second start: same links (never detached), new program inside, counters kept.
    let log = agent(&a, &pin_root, &["attach", "--uplink", "va"]);
    assert!(log.contains("reused=true"), "second start log: {log}");
    let (ingress_link2, ingress_prog2) = link_ids(&ingress);
    assert_eq!(ingress_link2, ingress_link, "the ingress link must be kept");
    assert_ne!(ingress_prog2, ingress_prog, "the program must be replaced");
    assert_eq!(
        link_ids(&egress).0,
        egress_link,
        "the egress link must be kept"
    );
    let after_restart = agent_packets(&pin_root, "pass_ipv4");
    assert!(
        after_restart >= after_first,
        "counters were reset by the restart: {after_restart} < {after_first}"
    );

    // The replaced program is live and counts into the same map.
    ping(&a, "198.18.250.2", 3);
    let after_second = agent_packets(&pin_root, "pass_ipv4");
    assert!(
        after_second >= after_restart + 6,
        "the new program did not count: {after_restart} -> {after_second}"
    );

    // bpftool prints the pinned map with named fields; its sums agree with the agent's.
    let out = run(Command::new("bpftool")
        .args(["-j", "map", "dump", "pinned"])
        .arg(pin_root.join("mc_counters")));
    let dump: Value = serde_json::from_slice(&out.stdout).expect("bpftool map JSON");
    let entry = dump
        .as_array()
        .expect("array of entries")
        .iter()
        .find(|e| e["formatted"]["key"] == 1)
        .expect("entry for key 1 (pass_ipv4)");
    let per_cpu = entry["formatted"]["values"].as_array().expect("values");
    let mut sum = 0;
    for v in per_cpu {
        let value = &v["value"];
        assert!(
            value.get("packets").is_some() && value.get("bytes").is_some(),
            "bpftool must print named fields (BTF): {value}"
        );
        sum += value["packets"].as_u64().unwrap();
    }
    assert_eq!(sum, agent_packets(&pin_root, "pass_ipv4"));

    // Detach removes the hooks: traffic no longer moves the counters.
    agent(&a, &pin_root, &["detach", "--uplink", "va"]);
    assert!(!ingress.exists() && !egress.exists());
    let before = agent_packets(&pin_root, "pass_ipv4");
    ping(&a, "198.18.250.2", 2);
    assert_eq!(agent_packets(&pin_root, "pass_ipv4"), before);
}

/// The agent binary as the DaemonSet runs it: only the capabilities its container is granted
/// (deploy/agent/daemonset.yaml), nothing gained on exec. Returns its log.
fn confined_agent(ns: &NetNs, pin_root: &Path, args: &[&str]) -> String {
    String::from_utf8_lossy(&run(&mut confined(ns, pin_root, args)).stderr).into_owned()
}

fn confined(ns: &NetNs, pin_root: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new("nsenter");
    cmd.arg(format!("--net={}", ns.path()))
        .args(setpriv_only(&daemonset_caps()))
        .arg(agent_bin())
        .arg("--pin-root")
        .arg(pin_root)
        .args(args);
    cmd
}

/// The capabilities the DaemonSet grants (BPF, PERFMON, NET_ADMIN, NET_RAW; no SYS_ADMIN, no
/// privileged container) are enough for everything the agent does to the kernel: load the
/// programs and maps, pin them, attach to the uplink and to netfilter, reuse the pins when it
/// starts again, and read them back (`counters`, `maps`); real packets are counted. And the
/// privileged init container's `mount-bpffs` mounts a BPF filesystem where there is none, once.
#[test]
fn the_daemonsets_capabilities_are_all_the_agent_needs() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let caps = daemonset_caps();
    assert!(
        !caps.iter().any(|(n, _)| n == "SYS_ADMIN"),
        "the agent container should not need SYS_ADMIN: {caps:?}"
    );
    let (a, _b) = linked("mc-caps", "198.18.250.9", "198.18.250.10");
    let fs = Bpffs::new("netns-caps");
    let pin_root = fs.pin_root();
    let attach = [
        "attach",
        "--uplink",
        "va",
        "--stretched-policy",
        "--tc-attach",
        &support::tc_attach(),
    ];
    let log = confined_agent(&a, &pin_root, &attach);
    assert!(log.contains(support::attached_log()), "{log}");
    assert!(pin_root.join("links/va_ingress").exists() || support::tc_attach() == "tc");
    ping(&a, "198.18.250.10", 3);
    let out = run(&mut confined(&a, &pin_root, &["counters", "--json"]));
    let readings: Value = serde_json::from_slice(&out.stdout).expect("counters JSON");
    let pass = readings
        .as_array()
        .and_then(|all| all.iter().find(|r| r["name"] == "pass_ipv4"))
        .and_then(|r| r["packets"].as_u64());
    assert!(pass >= Some(6), "{readings}");
    let log = confined_agent(&a, &pin_root, &attach);
    assert!(log.contains("reused=true"), "second start: {log}");
    let out = run(&mut confined(&a, &pin_root, &["maps"]));
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("ROLE "),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    confined_agent(&a, &pin_root, &["detach", "--uplink", "va", "--maps"]);

    // mount-bpffs, in a mount namespace of its own so that nothing of it outlives the test.
    let dir = std::env::temp_dir().join(format!("strait-mount-bpffs-{}", std::process::id()));
    let out = run(Command::new("unshare")
        .args(["--mount", "--propagation", "private", "--", "sh", "-c"])
        .arg(format!(
            "{bin} mount-bpffs --path {dir} && {bin} mount-bpffs --path {dir} && stat -f -c %T {dir}",
            bin = agent_bin().display(),
            dir = dir.display()
        )));
    let said = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(
        lines,
        [
            format!("mounted a BPF filesystem at {}", dir.display()).as_str(),
            format!("{} is a BPF filesystem already", dir.display()).as_str(),
            "bpf_fs"
        ],
        "{said}"
    );
    let _ = std::fs::remove_dir(&dir);
}

/// An uplink that is a Linux bridge works, and the agent warns what it costs: a bridge offers no
/// offloads for encapsulated packets, so the kernel checksums and segments every tunnel packet
/// leaving through it in software. A veth uplink gets no such warning.
#[test]
fn a_bridge_uplink_is_attached_with_a_warning_of_its_cost() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let a = NetNs::new("mc-bridge-a");
    let b = NetNs::new("mc-bridge-b");
    veth_pair(&a, "pa", &b, "pb");
    ip_in(
        &a,
        &[
            "link add br0 type bridge",
            "link set pa master br0",
            "link set pa up",
            "addr add 198.18.250.5/30 dev br0",
            "link set br0 up",
        ],
    );
    ip_in(&b, &["addr add 198.18.250.6/30 dev pb", "link set pb up"]);
    let warning = "the uplink is a Linux bridge";
    let fs = Bpffs::new("bridge-uplink");
    let pin_root = fs.pin_root();
    let log = agent(&a, &pin_root, &["attach", "--uplink", "br0"]);
    assert!(log.contains("attached with TCX"), "attach log: {log}");
    assert!(
        log.contains(warning),
        "the bridge's cost must be logged: {log}"
    );
    // The programs see the traffic through the bridge.
    ping(&a, "198.18.250.6", 3);
    assert!(agent_packets(&pin_root, "pass_ipv4") >= 6);
    agent(&a, &pin_root, &["detach", "--uplink", "br0"]);

    let fs = Bpffs::new("veth-uplink");
    let pin_root = fs.pin_root();
    let log = agent(&b, &pin_root, &["attach", "--uplink", "pb"]);
    assert!(log.contains("attached with TCX"), "attach log: {log}");
    assert!(!log.contains(warning), "a veth is not a bridge: {log}");
    agent(&b, &pin_root, &["detach", "--uplink", "pb"]);
}

/// Strait's filters of one hook in `tc filter show` of `dev`: (priority, handle, name) of each.
fn tc_filters(ns: &NetNs, dev: &str, hook: &str) -> Vec<String> {
    let out = run(ns.cmd("tc").args(["filter", "show", "dev", dev, hook]));
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains(" handle "))
        .map(|l| l.trim().to_owned())
        .collect()
}

/// Legacy TC (kernels without TCX, or `tcAttach: tc`): each program is one filter on the
/// uplink's clsact qdisc, first in its chain (priority 1); the programs count traffic; a
/// restart replaces each filter's program in place (still one filter, counters kept); and
/// `uninstall` takes the filters off.
#[test]
fn legacy_tc_filters_are_replaced_in_place_and_uninstalled() {
    if lacks_root(WHY_ROOT) {
        return;
    }
    let (a, _b) = linked("mc-tc", "198.18.250.9", "198.18.250.10");
    let fs = Bpffs::new("legacy-tc");
    let pin_root = fs.pin_root();
    let attach = || {
        let mut cmd = a.cmd(agent_bin());
        cmd.arg("--pin-root").arg(&pin_root).args([
            "attach",
            "--uplink",
            "va",
            "--tc-attach",
            "tc",
        ]);
        String::from_utf8_lossy(&run(&mut cmd).stderr).into_owned()
    };
    let log = attach();
    assert!(log.contains("attached as a TC filter"), "{log}");
    let first = (
        tc_filters(&a, "va", "ingress"),
        tc_filters(&a, "va", "egress"),
    );
    for (hook, filters, name) in [
        ("ingress", &first.0, "mc_ingress"),
        ("egress", &first.1, "mc_egress"),
    ] {
        assert_eq!(filters.len(), 1, "{hook}: {filters:?}");
        assert!(
            filters[0].contains("pref 1 ") && filters[0].contains(&format!("name {name}")),
            "{hook}: {filters:?}"
        );
    }
    ping(&a, "198.18.250.10", 3);
    let counted = agent_packets(&pin_root, "pass_ipv4");
    assert!(counted >= 6, "{counted} IPv4 packets counted");

    let log = attach();
    assert!(
        log.contains("replaced the program in Strait's TC filter"),
        "{log}"
    );
    let second = (
        tc_filters(&a, "va", "ingress"),
        tc_filters(&a, "va", "egress"),
    );
    assert_eq!(second.0.len(), 1, "{second:?}");
    assert_eq!(second.1.len(), 1, "{second:?}");
    assert_ne!(
        second, first,
        "the filters' programs (their ids) must be new"
    );
    ping(&a, "198.18.250.10", 3);
    assert!(agent_packets(&pin_root, "pass_ipv4") >= counted + 6);

    let state = std::env::temp_dir().join(format!("strait-tc-state-{}", std::process::id()));
    let mut cmd = a.cmd(agent_bin());
    cmd.arg("--pin-root")
        .arg(&pin_root)
        .arg("--state-dir")
        .arg(&state)
        .arg("uninstall");
    run(&mut cmd);
    assert!(tc_filters(&a, "va", "ingress").is_empty());
    assert!(tc_filters(&a, "va", "egress").is_empty());
    assert!(!pin_root.exists());
}

/// The agent's routes are in the main table with their own protocol and metric (1167), with no
/// `ip rule`: a route someone else made for the same prefix (a lower metric) or for part of it
/// stays, wins over Strait's and is reported; one with Strait's very metric keeps Strait from
/// routing that prefix at all (reported) rather than be replaced; an earlier version's table 167
/// and its rule go; and uninstall takes every route of Strait's away and nobody else's.
#[test]
fn routes_are_strait_s_own_and_replace_no_one_else_s() {
    use std::{collections::BTreeSet, net::Ipv4Addr};

    use mc_agent::{routes, state::Prefix};

    if lacks_root(WHY_ROOT) {
        return;
    }
    let ns = NetNs::new("mc-routes");
    let peer = NetNs::new("mc-routes-peer");
    run(Command::new("ip").args([
        "link", "add", "up0", "netns", &ns.name, "type", "veth", "peer", "name", "eth0", "netns",
        &peer.name,
    ]));
    let sh_in = |ns: &NetNs, line: &str| run(ns.cmd("sh").args(["-c", line]));
    sh_in(
        &ns,
        "ip addr add 198.18.40.1/24 dev up0 && ip link set up0 up",
    );
    sh_in(
        &peer,
        "ip addr add 198.18.40.2/24 dev eth0 && ip link set eth0 up",
    );
    // Someone else's routes: the very prefix Strait will route, a part of another one, and one
    // with Strait's metric; and an earlier Strait's table 167 with its rule, and its route in
    // the main table (metric 0).
    sh_in(
        &ns,
        "ip route add 10.98.0.0/16 via 198.18.40.3 proto static && \
         ip route add 10.97.5.0/24 via 198.18.40.4 proto static && \
         ip route add 10.95.0.0/16 via 198.18.40.5 proto static metric 1167 && \
         ip route add 10.99.0.0/16 via 198.18.40.2 proto 167 && \
         ip route add 10.96.0.0/16 via 198.18.40.2 proto 167 table 167 && \
         ip rule add pref 32000 lookup 167",
    );
    let show = |ns: &NetNs, args: &str| {
        let out = sh_in(ns, &format!("ip -4 {args}"));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };

    let prefixes: BTreeSet<Prefix> = [
        "10.98.0.0/16",
        "10.97.0.0/16",
        "10.95.0.0/16",
        "10.94.0.0/16",
    ]
    .iter()
    .map(|p| Prefix::parse(p).unwrap())
    .collect();
    let toward = Some(Ipv4Addr::new(198, 18, 40, 2));
    let mut reports = Vec::new();
    for _ in 0..2 {
        let p = prefixes.clone();
        reports.push(
            in_netns(&ns, move || routes::sync("up0", &p, toward))
                .join()
                .unwrap()
                .expect("route sync"),
        );
    }
    let main = show(&ns, "route show table main");
    for ours in ["10.98.0.0/16", "10.97.0.0/16", "10.94.0.0/16"] {
        assert!(
            main.contains(&format!(
                "{ours} via 198.18.40.2 dev up0 proto 167 metric 1167"
            )),
            "{main}"
        );
    }
    for theirs in [
        "10.98.0.0/16 via 198.18.40.3 dev up0 proto static",
        "10.97.5.0/24 via 198.18.40.4 dev up0 proto static",
        "10.95.0.0/16 via 198.18.40.5 dev up0 proto static metric 1167",
    ] {
        assert!(main.contains(theirs), "someone else's route stays: {main}");
    }
    assert!(
        !main.contains("10.99.0.0/16") && !main.contains("10.95.0.0/16 via 198.18.40.2"),
        "the earlier Strait's route goes, and 10.95/16 is not Strait's: {main}"
    );
    assert!(
        show(&ns, "route show table all")
            .matches("proto 167")
            .count()
            == 3
    );
    assert!(!show(&ns, "rule show").contains("lookup 167"), "no rule");
    // The same report every sync: what wins over Strait's, and what Strait could not route.
    assert_eq!(reports[0].shadowed, reports[1].shadowed);
    let shadowed = reports[1].shadowed.join("\n");
    assert_eq!(reports[1].shadowed.len(), 3, "{shadowed}");
    for says in [
        "10.98.0.0/16: the route 10.98.0.0/16 via 198.18.40.3 dev up0 proto static metric 0 wins",
        "10.97.0.0/16: the route 10.97.5.0/24 via 198.18.40.4",
        "10.95.0.0/16 is not routed: the route 10.95.0.0/16 via 198.18.40.5",
    ] {
        assert!(shadowed.contains(says), "{says}: {shadowed}");
    }
    // Only a prefix Strait's route carries whole counts as routed (for the egress's flag 1).
    assert_eq!(
        reports[1].routed,
        [Prefix::parse("10.94.0.0/16").unwrap()].into()
    );
    // Longest prefix, then metric: Strait's route carries what no route of theirs claims.
    assert!(show(&ns, "route get 10.97.1.1").contains("via 198.18.40.2"));
    assert!(show(&ns, "route get 10.97.5.1").contains("via 198.18.40.4"));
    assert!(show(&ns, "route get 10.98.1.1").contains("via 198.18.40.3"));
    // The second sync found every route in place: nothing added (and no `ip` run for them).
    assert_eq!(reports[0].added.len(), 3, "{:?}", reports[0].added);
    assert!(reports[1].added.is_empty(), "{:?}", reports[1].added);

    // A new next hop (the gateway moved): Strait's routes move with it, none is "added".
    let p = prefixes.clone();
    let moved = in_netns(&ns, move || {
        routes::sync("up0", &p, Some(Ipv4Addr::new(198, 18, 40, 6)))
    })
    .join()
    .unwrap()
    .expect("route sync");
    assert!(moved.added.is_empty(), "{:?}", moved.added);
    let main = show(&ns, "route show table main");
    for ours in ["10.98.0.0/16", "10.97.0.0/16", "10.94.0.0/16"] {
        assert!(
            main.contains(&format!(
                "{ours} via 198.18.40.6 dev up0 proto 167 metric 1167"
            )),
            "{main}"
        );
    }

    // No prefixes: Strait's go, the others stay.
    in_netns(&ns, || routes::sync("up0", &BTreeSet::new(), None))
        .join()
        .unwrap()
        .expect("route sync");
    assert!(!show(&ns, "route show table all").contains("proto 167"));
    assert!(show(&ns, "route show table main").contains("10.98.0.0/16 via 198.18.40.3"));

    // Uninstall: nothing of Strait's is left, everyone else's stays.
    let p = prefixes.clone();
    in_netns(&ns, move || routes::sync("up0", &p, toward))
        .join()
        .unwrap()
        .expect("route sync");
    sh_in(&ns, "ip rule add pref 32000 lookup 167");
    let (flushed, rule, has_rule) = in_netns(&ns, || {
        (
            routes::flush_own().expect("flush"),
            routes::remove_rule().expect("rule"),
            routes::has_rule().expect("rule"),
        )
    })
    .join()
    .unwrap();
    assert_eq!(flushed, ["10.94.0.0/16", "10.97.0.0/16", "10.98.0.0/16"]);
    assert!(rule && !has_rule);
    let main = show(&ns, "route show table main");
    assert!(main.contains("10.98.0.0/16 via 198.18.40.3"), "{main}");
    assert!(main.contains("10.95.0.0/16 via 198.18.40.5"), "{main}");
}
