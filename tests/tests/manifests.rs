//! The deployment manifests are valid for a real API server (`kubectl apply --dry-run=server`).

use mc_integration::{Testbed, repo_root};

fn dry_run(tb: &Testbed, cluster: &str, dir: &str) {
    let path = repo_root().join(dir);
    let out = tb
        .kubectl(cluster)
        .args(["apply", "--dry-run=server", "-k"])
        .arg(&path)
        .output()
        .expect("kubectl");
    assert!(
        out.status.success(),
        "{dir} is not valid for {cluster}'s API server:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("(server dry run)"),
        "{dir}: expected a server dry run, got:\n{stdout}"
    );
}

#[test]
fn leader_manifests_validate_on_the_leader() {
    let tb = Testbed::from_env();
    tb.ensure_namespace("north", "antrea-multicluster");
    dry_run(&tb, "north", "deploy/leader");
}

#[test]
fn member_and_agent_manifests_validate_on_a_member() {
    let tb = Testbed::from_env();
    dry_run(&tb, "east", "deploy/member");
    dry_run(&tb, "east", "deploy/agent");
}
