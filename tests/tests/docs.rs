//! The README's command blocks, run as written (only the placeholders filled in) against the
//! testbed: what the README tells an operator to type must work and show what it says. The
//! install commands are what `testbed up` runs (testbed/src/incluster.rs), the join the
//! demo's `mcctl` steps, the uninstall block `kubelet_nodes.rs`'s uninstall test.

use std::process::Command;

use mc_integration::{Testbed, join, mcctl_bin, repo_root};

/// The ```sh blocks of the README section that starts with `heading`.
fn blocks(heading: &str) -> Vec<String> {
    let readme = std::fs::read_to_string(repo_root().join("README.md")).expect("README.md");
    let start = readme
        .find(heading)
        .unwrap_or_else(|| panic!("README has no {heading:?}"));
    let rest = &readme[start + heading.len()..];
    let end = rest.find("\n## ").unwrap_or(rest.len());
    let mut out = Vec::new();
    let mut lines = rest[..end].lines();
    while let Some(l) = lines.next() {
        if l.trim() == "```sh" {
            let block: Vec<&str> = lines.by_ref().take_while(|l| l.trim() != "```").collect();
            out.push(block.join("\n"));
        }
    }
    out
}

/// Runs a README block in bash with `kubectl` and `mcctl` meaning the testbed's, for `cluster`.
fn run_block(tb: &Testbed, cluster: &str, block: &str) -> String {
    let script = format!(
        "set -euo pipefail\nkubectl() {{ \"$STRAIT_KUBECTL\" --kubeconfig \"$STRAIT_KUBECONFIG\" \"$@\"; }}\n\
         mcctl() {{ \"$STRAIT_MCCTL\" --kubeconfig \"$STRAIT_KUBECONFIG\" \"$@\"; }}\nset -x\n{block}\n"
    );
    let out = Command::new("bash")
        .args(["-c", &script])
        .env("STRAIT_KUBECTL", tb.kubectl_path())
        .env("STRAIT_KUBECONFIG", tb.kubeconfig(cluster))
        .env("STRAIT_MCCTL", mcctl_bin())
        .current_dir(repo_root())
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{cluster}: the README block failed:\n{block}\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn the_readmes_inspection_commands_work_on_a_member_and_show_what_it_says() {
    let tb = Testbed::from_env();
    join::ensure_joined(&tb);
    let blocks = blocks("### Inspecting\n");
    assert_eq!(blocks.len(), 3, "{blocks:?}");
    // verify and diagnose across east and west: the README's kubeconfig files are the
    // testbed's, and verify's Pods take the testbed's preloaded image (it pulls nothing).
    let kubeconfigs = std::env::join_paths([tb.kubeconfig("east"), tb.kubeconfig("west")])
        .expect("kubeconfig list");
    let block = blocks[0]
        .replace("east.yaml:west.yaml", &kubeconfigs.to_string_lossy())
        .replace(
            "mcctl verify east west",
            &format!(
                "mcctl verify east west --image {} --image-pull-policy Never",
                mc_integration::pods::tools_image()
            ),
        );
    let out = Command::new("bash")
        .args([
            "-c",
            &format!(
                "set -euo pipefail\nmcctl() {{ \"$STRAIT_MCCTL\" \"$@\"; }}\nset -x\n{block}\n"
            ),
        ])
        .env("STRAIT_MCCTL", mcctl_bin())
        .current_dir(repo_root())
        .output()
        .expect("bash");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the README's verify and diagnose failed:\n{block}\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for want in ["verify passed", "CHECK", "tunnel"] {
        assert!(stdout.contains(want), "{want:?} missing from:\n{stdout}");
    }
    // The overview, in a member.
    let out = run_block(&tb, "east", &blocks[1]);
    for want in [
        "CLUSTER-ID",
        "Connected",
        "gateway.multicluster.crd.antrea.io/node-a",
    ] {
        assert!(out.contains(want), "{want:?} missing from:\n{out}");
    }
    // A Node's dataplane through its agent Pod: east's gateway.
    let block = blocks[2]
        .replace("<node>", "node-a")
        .replace("<uplink>", "eth0");
    let out = run_block(&tb, "east", &block);
    for want in [
        "COUNTER",
        "tx_to_gateway",
        "pass_foreign_tunnel",
        "ROLE gateway",
        "REMOTE PREFIX",
        "10.98.0.0/16",
        "dev eth0 metric 1167",
        // bpftool from the debugging Pod on the Node.
        "\"gateway_ip\"",
    ] {
        assert!(out.contains(want), "{want:?} missing from:\n{out}");
    }
    // `kubectl debug node` leaves its Pod behind.
    for pod in tb.ok("east", &["get", "pods", "-o", "name"]).lines() {
        if pod.starts_with("pod/node-debugger-") {
            tb.delete("east", &[pod]);
        }
    }
}
