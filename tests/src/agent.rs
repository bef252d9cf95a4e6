//! Running `cargo xtask` as the tests do, and reading a Node's dataplane with this checkout's
//! `mc-agent` in the Node's namespaces (`testbed exec`), as an operator runs it on a Node.

use std::process::Command;

use serde_json::Value;

use crate::repo_root;

/// `cargo xtask <args>` from the repository: its output (the test fails when it does).
pub fn xtask(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO"))
        .arg("xtask")
        .args(args)
        .current_dir(repo_root())
        .env("RUST_BACKTRACE", "0")
        .output()
        .expect("running cargo xtask");
    assert!(
        out.status.success(),
        "cargo xtask {}: {}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// This checkout's mc-agent (debug), built once: the tests read a Node's pinned maps with it in
/// the Node's namespaces, as an operator runs it on a Node. (Not through `kubectl exec`: a Node
/// whose kubelet is stopped still has its dataplane.)
pub fn agent_bin() -> std::path::PathBuf {
    static BUILT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    BUILT.get_or_init(|| build_agent(None)).clone()
}

/// Builds mc-agent (debug) and returns its path: this checkout's build, or with `build_id` a
/// different build (`STRAIT_BUILD_ID`: its own version tag) in a target directory of its own.
pub fn build_agent(build_id: Option<&str>) -> std::path::PathBuf {
    let mut dir = std::env::var("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| repo_root().join("target"));
    let mut cmd = Command::new(env!("CARGO"));
    cmd.args(["build", "--quiet", "-p", "mc-agent", "--bin", "mc-agent"])
        .current_dir(repo_root());
    if let Some(id) = build_id {
        dir = std::path::PathBuf::from(format!("{}-upgrade", dir.display()));
        cmd.env("CARGO_TARGET_DIR", &dir).env("STRAIT_BUILD_ID", id);
    }
    let out = cmd.output().expect("cargo build");
    assert!(
        out.status.success(),
        "building mc-agent {build_id:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.join("debug/mc-agent")
}

/// Counters of a Node's agent (from its own pinned map, through `testbed exec`).
pub fn counters(cluster: &str, node: &str) -> Value {
    let out = xtask(&[
        "testbed",
        "exec",
        &format!("{cluster}/{node}"),
        "--",
        agent_bin().to_str().unwrap(),
        "counters",
        "--json",
    ]);
    serde_json::from_str(&out).expect("counters JSON")
}

pub fn packets(counters: &Value, name: &str) -> u64 {
    counters
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no counter {name}"))["packets"]
        .as_u64()
        .unwrap()
}

/// `mc-agent maps` on `cluster`'s active gateway Node (the one whose maps say `ROLE gateway`).
pub fn gateway_maps(cluster: &str) -> String {
    try_gateway_maps(cluster).unwrap_or_else(|| panic!("no gateway Node in {cluster}"))
}

/// As [`gateway_maps`], `None` while no Node's maps say `ROLE gateway`.
pub fn try_gateway_maps(cluster: &str) -> Option<String> {
    ["node-a", "node-b"]
        .iter()
        .map(|n| {
            xtask(&[
                "testbed",
                "exec",
                &format!("{cluster}/{n}"),
                "--",
                agent_bin().to_str().unwrap(),
                "maps",
            ])
        })
        .find(|m| m.starts_with("ROLE gateway"))
}
