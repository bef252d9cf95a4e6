#!/usr/bin/env bash
# The test command (README; .ci/run runs exactly this). As root (no sudo needed), on a fresh machine:
#   bash scripts/test.sh
# installs what is missing (scripts/setup.sh), then: rustfmt, clippy (user space and the eBPF
# crate separately), unit tests, the CRD drift check, the lint, the eBPF kernel tests, the images, the
# testbed (kubelet Nodes, Strait installed in-cluster from deploy/ and the chart) and every test
# against it, `down` after a simulated crash, and the demo's walk-through (it brings the
# testbed up and takes it down).
#
# A test that needs root (the agent's kernel tests: eBPF programs, network namespaces) or the
# testbed (mc-integration) is skipped where that is missing, with a line on stderr saying what
# and why, so a plain `cargo test` as a user passes. Here nothing may be skipped:
# STRAIT_TEST_REQUIRE=root,testbed makes a missing prerequisite fail the test instead.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/env.sh
export STRAIT_TEST_REQUIRE=root,testbed

total_start=$(date +%s)
step() {
  local name=$1; shift
  local t0; t0=$(date +%s)
  printf '\n=== %s\n' "$name"
  "$@"
  printf '=== %s: ok (%ss)\n' "$name" "$(( $(date +%s) - t0 ))"
}

# The disk is shared by the build cache, the images and the kubelets (which taint their Nodes
# below 1% free): say what there is, so a failure for space is read at once.
df -h / "${STRAIT_CACHE:-/var/cache/strait}" 2>/dev/null | awk 'NR == 1 || !seen[$1]++' || true
step "setup" bash scripts/setup.sh
step "rustfmt" cargo fmt --all -- --check
step "clippy (user space)" cargo clippy --workspace --exclude mc-ebpf --all-targets -- -D warnings
step "clippy (eBPF)" bash -c "cd mc-ebpf && cargo +$RUST_NIGHTLY clippy --release --target bpfel-unknown-none -Z build-std=core -- -D warnings"
# Every crate's unit tests but the testbed's, and the agent's pure ones (its library's and the
# properties of its desired state); its kernel tests run one at a time below.
unit_tests() {
  cargo test --workspace --exclude mc-ebpf --exclude mc-integration --exclude mc-agent
  cargo test -p mc-agent --lib --test state_properties
}
step "unit tests" unit_tests
step "CRD drift" cargo xtask crdgen --check
# No function in product code over 120 lines, no import cycle between a crate's modules.
step "lint (function length, module cycles)" cargo xtask lint
# Kernel tests share one kernel: one at a time.
step "eBPF tests (root, netns)" cargo test -p mc-agent -- --test-threads=1
# The traffic between namespaces again with the programs attached as legacy TC filters (what
# kernels without TCX, before 6.6, get).
step "eBPF traffic tests, legacy TC attach" env STRAIT_TEST_TC_ATTACH=tc cargo test -p mc-agent --test cross_cluster -- --test-threads=1

# The images first: the testbed's Nodes run them (nothing is pulled from a registry).
step "images" cargo xtask image build

cleanup() { cargo xtask testbed down >/dev/null 2>&1 || true; }
trap cleanup EXIT
step "testbed down (leftovers)" cargo xtask testbed down
# Kubelet Nodes (containerd, runc, CNI, CoreDNS); Strait installed from deploy/ and, in west,
# the Helm chart; its controllers and agents run in Pods.
step "testbed up" cargo xtask testbed up
step "testbed tests" cargo test -p mc-integration -- --test-threads=1
step "testbed status (memory after the tests)" cargo xtask testbed status
crash_down() {
  # As after a crash: the PID files are gone, the processes still run. `down` must still find
  # and stop every process and container and remove the namespaces and cgroups. (Matched by
  # the testbed's paths where a machine may run its own: containerd, kubelets.)
  rm -rf target/testbed/pids
  cargo xtask testbed down
  local left=""
  ip netns list | grep -q '^strait-' && left+=" netns: $(ip netns list | grep '^strait-' | tr '\n' ' ')"
  pgrep -f 'mc-agent run' >/dev/null && left+=" mc-agent"
  pgrep -f 'mc-controller (leader|member)' >/dev/null && left+=" mc-controller"
  pgrep -x kube-proxy >/dev/null && left+=" kube-proxy"
  pgrep -x flanneld >/dev/null && left+=" flanneld"
  pgrep -f 'kube-apiserver --etcd-servers' >/dev/null && left+=" kube-apiserver"
  pgrep -x etcd >/dev/null && left+=" etcd"
  pgrep -f 'target/testbed/nodes/.*/kubelet.yaml' >/dev/null && left+=" kubelet"
  pgrep -f 'target/testbed/nodes/.*/containerd.toml' >/dev/null && left+=" containerd"
  pgrep -f "${STRAIT_CACHE:-/var/cache/strait}/node/.*/containerd-shim" >/dev/null && left+=" containerd-shim"
  find /sys/fs/cgroup -maxdepth 2 -name strait-testbed | grep -q . && left+=" the Nodes' cgroups"
  if [ -n "$left" ]; then echo "left behind after down:$left" >&2; return 1; fi
}
step "testbed down (after losing its PID files)" crash_down
# The README's demo is a test too: it exits 0 only if a Pod in east got west's answer.
step "demo (the guide's walk-through, end to end)" bash scripts/demo.sh
trap - EXIT

printf '\nall tests passed in %ss\n' "$(( $(date +%s) - total_start ))"
