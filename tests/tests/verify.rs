//! Issue 57: `mcctl verify` and `mcctl diagnose` against the testbed, as an operator runs them
//! (one kubeconfig per cluster, listed in `--kubeconfig` as KUBECONFIG lists them): both pass
//! across east and west and verify leaves nothing behind; with the tunnel's port blocked
//! between the gateways at the router, verify fails naming the gateway pair and diagnose names
//! the blocked port; interrupted, verify still removes what it made; and the Pods' MTU is
//! larger than what the tunnel carries, which the dataplane handles (both pass).

use std::{
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use mc_integration::{Testbed, join, mcctl_bin, net::UnderlayCut, pods::tools_image, wait_for};
use serde_json::Value;

const T: Duration = Duration::from_secs(60);

fn joined() -> Testbed {
    let tb = Testbed::from_env();
    join::ensure_joined_with_gateways(&tb);
    for (c, remote) in [("east", "west"), ("west", "east")] {
        wait_for(&format!("{c}'s TunnelUp to {remote}"), T, || {
            match tb.tunnel_up(c, remote) {
                Some((s, _)) if s == "True" => Ok(()),
                other => Err(format!("{other:?}")),
            }
        });
    }
    tb
}

/// `mcctl --kubeconfig <east's>:<west's> args...`.
fn mcctl(tb: &Testbed, args: &[&str]) -> Command {
    let kubeconfig = std::env::join_paths([tb.kubeconfig("east"), tb.kubeconfig("west")])
        .expect("kubeconfig list");
    let mut cmd = Command::new(mcctl_bin());
    cmd.arg("--kubeconfig").arg(kubeconfig).args(args);
    cmd
}

/// `mcctl verify east west` with the testbed's preloaded image.
fn verify_cmd(tb: &Testbed) -> Command {
    let image = tools_image();
    mcctl(
        tb,
        &[
            "verify",
            "east",
            "west",
            "--image",
            &image,
            "--image-pull-policy",
            "Never",
            "--timeout",
            "90",
        ],
    )
}

/// [`verify_cmd`], run: (success, stdout, stderr).
fn verify(tb: &Testbed) -> (bool, String, String) {
    let out = verify_cmd(tb).output().expect("running mcctl verify");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn diagnose(tb: &Testbed) -> (bool, Value) {
    let out = mcctl(tb, &["diagnose", "east", "west", "-o", "json"])
        .output()
        .expect("running mcctl diagnose");
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "diagnose -o json: {e}\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.success(), v)
}

fn checks<'a>(v: &'a Value, cluster: &str, check: &str) -> Vec<&'a Value> {
    v["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["cluster"] == join::id(cluster) && c["check"] == check)
        .collect()
}

/// Nothing of a verify run is left: no namespace it made in east or west, no export of one in
/// the leader.
fn nothing_left(tb: &Testbed) {
    wait_for("verify's objects gone everywhere", T, || {
        for c in ["east", "west"] {
            let nss = tb
                .try_json(
                    c,
                    &[
                        "get",
                        "ns",
                        "-l",
                        "app.kubernetes.io/managed-by=mcctl-verify",
                    ],
                )
                .ok_or("kubectl failed")?;
            if let Some(n) = nss["items"].as_array().and_then(|i| i.first()) {
                return Err(format!("{c}: namespace {} left", n["metadata"]["name"]));
            }
        }
        for kind in ["resourceexports", "resourceimports"] {
            let list = tb
                .try_json("north", &["get", kind, "-n", join::LEADER_NS])
                .ok_or("kubectl failed")?;
            let left: Vec<String> = list["items"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|o| {
                    o["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                })
                .filter(|n| n.contains("strait-verify-"))
                .collect();
            if !left.is_empty() {
                return Err(format!("leader: {kind} {left:?} left"));
            }
        }
        Ok(())
    });
}

/// The table's rows: FROM TO PATH RESULT ...
fn rows(table: &str) -> Vec<Vec<String>> {
    table
        .lines()
        .skip_while(|l| !l.starts_with("FROM"))
        .skip(1)
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("verify") && !l.starts_with("first"))
        .map(|l| {
            l.split("   ")
                .map(|c| c.trim().to_owned())
                .filter(|c| !c.is_empty())
                .collect()
        })
        .collect()
}

#[test]
fn verify_and_diagnose_pass_across_east_and_west_and_verify_leaves_nothing_behind() {
    let tb = joined();
    let at = Instant::now();
    let (ok, out, err) = verify(&tb);
    let took = at.elapsed();
    assert!(ok, "verify failed:\n{out}\n{err}");
    let rows = rows(&out);
    // From both members' gateway and regular Node, to the other: every path, each ok.
    for (from, to) in [("east", "west"), ("west", "east")] {
        for node in ["node-a (gateway)", "node-b (node)"] {
            for path in ["service", "transfer", "dns", "pod"] {
                let row = rows
                    .iter()
                    .find(|r| {
                        r[0] == format!("{}/{node}", join::id(from))
                            && r[1] == join::id(to)
                            && r[2] == path
                    })
                    .unwrap_or_else(|| panic!("no row {from}/{node} -> {to} {path}:\n{out}"));
                assert_eq!(row[3], "ok", "{row:?}\n{out}");
            }
        }
    }
    nothing_left(&tb);

    let (ok, v) = diagnose(&tb);
    assert!(ok, "diagnose failed:\n{v:#}");
    for c in ["east", "west"] {
        for check in [
            "versions",
            "agents",
            "uplink-programs",
            "gateway",
            "leader",
            "cidrs",
            "pod-cidrs",
            "tunnel",
            "mtu",
            "kube-proxy",
            "masquerade",
            "webhooks",
        ] {
            let found = checks(&v, c, check);
            assert!(!found.is_empty(), "{c}: no {check} check:\n{v:#}");
            for f in found {
                assert_ne!(f["verdict"], "fail", "{c} {check}: {f:#}");
            }
        }
    }
    // Per peer, each way: both of east's clients downloaded 4 MiB from west's server through
    // east's gateway.
    let tunnel = checks(&v, "east", "tunnel")[0]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let received: u64 = tunnel
        .split("received ")
        .nth(1)
        .and_then(|r| {
            r.split(" packets (")
                .nth(1)?
                .split(' ')
                .next()?
                .parse()
                .ok()
        })
        .unwrap_or_else(|| panic!("no bytes received in {tunnel}"));
    assert!(received > 2 * 4 * 1024 * 1024, "{tunnel}");
    // What the agents say of their Nodes: the mixed ClusterSet's kube-proxy modes.
    let mode = |c: &str| checks(&v, c, "kube-proxy")[0]["detail"].to_string();
    assert!(
        mode("east").contains("nftables on node-a, node-b"),
        "{}",
        mode("east")
    );
    assert!(
        mode("west").contains("iptables on node-a, node-b"),
        "{}",
        mode("west")
    );
    eprintln!("verify passed in {:.1} s:\n{out}", took.as_secs_f64());
}

/// The Pods' MTU (1464 in east, 1450 in west) is larger than what the tunnel carries with
/// WireGuard on (1500 - 60 - 36 = 1404 bytes of inner packet): the dataplane clamps TCP's MSS
/// and answers oversize DF packets with fragmentation-needed, so the full-size transfer passes
/// and diagnose says what the tunnel carries and that handshakes were clamped.
#[test]
fn a_pod_mtu_larger_than_the_tunnel_carries_is_handled_and_both_pass() {
    let tb = joined();
    let (ok, out, err) = verify(&tb);
    assert!(ok, "verify failed:\n{out}\n{err}");
    let transfers: Vec<Vec<String>> = rows(&out)
        .into_iter()
        .filter(|r| r[2] == "transfer")
        .collect();
    assert_eq!(transfers.len(), 4, "{out}");
    let (ok, v) = diagnose(&tb);
    assert!(ok, "diagnose failed:\n{v:#}");
    for r in &transfers {
        assert_eq!(r[3], "ok", "{r:?}");
        let mtu: u32 = r[5]
            .split("Pod MTU ")
            .nth(1)
            .and_then(|m| m.trim_end_matches(')').parse().ok())
            .unwrap_or_else(|| panic!("no Pod MTU in {r:?}"));
        let from = if r[0].starts_with(&join::id("east")) {
            "east"
        } else {
            "west"
        };
        let detail = checks(&v, from, "mtu")[0]["detail"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let inner: u32 = detail
            .split("inner packets up to ")
            .nth(1)
            .and_then(|d| d.split(' ').next()?.parse().ok())
            .unwrap_or_else(|| panic!("no inner size in {detail}"));
        assert!(
            mtu > inner,
            "{from}'s Pods' MTU {mtu} is not larger than the tunnel's {inner}: nothing is tested"
        );
        let clamped: u64 = detail
            .split(" TCP handshakes clamped")
            .next()
            .and_then(|d| d.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0);
        assert!(clamped > 0, "{detail}");
    }
    nothing_left(&tb);
}

#[test]
fn a_blocked_tunnel_port_fails_verify_at_the_gateway_pair_and_diagnose_names_the_port() {
    let tb = joined();
    let gw = |c: &str| {
        tb.get_json(c, &["get", "gateway", "-n", join::MEMBER_NS, "node-a"])["gatewayIP"]
            .as_str()
            .expect("gatewayIP")
            .to_owned()
    };
    let (east_gw, west_gw) = (gw("east"), gw("west"));
    // WireGuard's port: the tunnel's way between the gateways with encryption on.
    let blocked = UnderlayCut::udp_port(&east_gw, &west_gw, 51821);
    wait_for("TunnelUp False on both sides", T, || {
        match (tb.tunnel_up("east", "west"), tb.tunnel_up("west", "east")) {
            (Some((a, _)), Some((b, _))) if a == "False" && b == "False" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    let (ok, v) = diagnose(&tb);
    assert!(!ok, "diagnose passed with the port blocked:\n{v:#}");
    let tunnel = checks(&v, "east", "tunnel");
    assert_eq!(tunnel[0]["verdict"], "fail", "{v:#}");
    let detail = tunnel[0]["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("UDP 51821") && detail.contains(&east_gw) && detail.contains(&west_gw),
        "{detail}"
    );
    let (ok, out, err) = verify(&tb);
    assert!(!ok, "verify passed with the port blocked:\n{out}");
    let hop = out
        .lines()
        .find(|l| l.starts_with("first failing hop") && l.contains(&join::id("east")))
        .unwrap_or_else(|| panic!("no first failing hop from east:\n{out}\n{err}"));
    assert!(
        hop.contains("the tunnel between the gateways")
            && hop.contains(&east_gw)
            && hop.contains(&west_gw),
        "{hop}"
    );
    nothing_left(&tb);
    drop(blocked);
    let at = Instant::now();
    wait_for("TunnelUp True again on both sides", T, || {
        match (tb.tunnel_up("east", "west"), tb.tunnel_up("west", "east")) {
            (Some((a, _)), Some((b, _))) if a == "True" && b == "True" => Ok(()),
            other => Err(format!("{other:?}")),
        }
    });
    assert!(at.elapsed() <= Duration::from_secs(5), "{:?}", at.elapsed());
    let (ok, v) = diagnose(&tb);
    assert!(ok, "diagnose still fails after the restore:\n{v:#}");
}

#[test]
fn an_interrupted_verify_removes_what_it_made() {
    let tb = joined();
    let child = verify_cmd(&tb)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("mcctl verify");
    wait_for("verify's namespace in west", T, || {
        let nss = tb
            .try_json(
                "west",
                &[
                    "get",
                    "ns",
                    "-l",
                    "app.kubernetes.io/managed-by=mcctl-verify",
                ],
            )
            .ok_or("kubectl failed")?;
        nss["items"]
            .as_array()
            .filter(|i| !i.is_empty())
            .map(|_| ())
            .ok_or_else(|| "none yet".to_owned())
    });
    // SAFETY: a signal to our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let out = child.wait_with_output().expect("mcctl verify");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{err}");
    assert!(err.contains("interrupted"), "{err}");
    nothing_left(&tb);
}
