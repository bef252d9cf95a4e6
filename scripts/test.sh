#!/usr/bin/env bash
# The test command (README; .ci/run runs exactly this). As root, on a fresh machine:
#   sudo bash scripts/test.sh
# installs what is missing (scripts/setup.sh), then: rustfmt, clippy (user space and the eBPF
# crate separately), unit tests, the CRD drift check, the eBPF kernel tests, the tests against
# the real testbed, cross-cluster traffic on a testbed with Nodes, the images and the kubelet
# testbed (Strait installed from deploy/ and the chart, tests of what operators do), and the
# demo's walk-through (it brings the testbed up and takes it down).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/env.sh

total_start=$(date +%s)
step() {
  local name=$1; shift
  local t0; t0=$(date +%s)
  printf '\n=== %s\n' "$name"
  "$@"
  printf '=== %s: ok (%ss)\n' "$name" "$(( $(date +%s) - t0 ))"
}

step "setup" bash scripts/setup.sh
step "rustfmt" cargo fmt --all -- --check
step "clippy (user space)" cargo clippy --workspace --exclude mc-ebpf --all-targets -- -D warnings
step "clippy (eBPF)" bash -c "cd mc-ebpf && cargo +$RUST_NIGHTLY clippy --release --target bpfel-unknown-none -Z build-std=core -- -D warnings"
step "unit tests" cargo test --workspace --exclude mc-ebpf --exclude mc-integration --exclude mc-agent
step "CRD drift" cargo xtask crdgen --check
# Kernel tests share one kernel: one at a time.
step "eBPF tests (root, netns)" cargo test -p mc-agent -- --test-threads=1

cleanup() { cargo xtask testbed down >/dev/null 2>&1 || true; }
trap cleanup EXIT
step "testbed down (leftovers)" cargo xtask testbed down
step "testbed up" cargo xtask testbed up
step "testbed tests" cargo test -p mc-integration -- --test-threads=1
step "testbed status (memory after the tests)" cargo xtask testbed status
crash_down() {
  # As after a crash: the PID files are gone, the processes still run. `down` must still find
  # and stop every process and remove the namespace.
  rm -rf target/testbed/pids
  cargo xtask testbed down
  if ip netns list | grep -q '^strait-'; then echo "testbed netns left behind: $(ip netns list | grep '^strait-')" >&2; return 1; fi
  if pgrep -f 'mc-agent run' >/dev/null; then echo "mc-agent left running" >&2; return 1; fi
  if pgrep -x kube-proxy >/dev/null; then echo "kube-proxy left running" >&2; return 1; fi
  if pgrep -f 'kube-apiserver --etcd-servers' >/dev/null; then echo "kube-apiserver left running" >&2; return 1; fi
  if pgrep -x etcd >/dev/null; then echo "etcd left running" >&2; return 1; fi
}
step "testbed down (after losing its PID files)" crash_down
# Strait as users deploy it: images, kubelet Nodes, installed from deploy/ and the chart.
step "images" cargo xtask image build
step "testbed up (kubelet Nodes, Strait in-cluster)" cargo xtask testbed up --kubelets --join
step "kubelet Node tests" cargo test -p mc-integration --test kubelet_nodes -- --ignored --test-threads=1
step "testbed status (kubelet Nodes)" cargo xtask testbed status
kubelet_down() {
  cargo xtask testbed down
  # (Matched by the testbed's paths: a machine may run its own containerd.)
  if pgrep -f 'target/testbed/nodes/.*/kubelet.yaml' >/dev/null; then echo "kubelet left running" >&2; return 1; fi
  if pgrep -f 'target/testbed/nodes/.*/containerd.toml' >/dev/null; then echo "containerd left running" >&2; return 1; fi
  if pgrep -f "${STRAIT_CACHE:-/var/cache/strait}/node/.*/containerd-shim" >/dev/null; then echo "a containerd shim left running" >&2; return 1; fi
  if find /sys/fs/cgroup -maxdepth 2 -name strait-testbed | grep -q .; then echo "the Nodes' cgroups left behind" >&2; return 1; fi
}
step "testbed down (kubelet Nodes)" kubelet_down
# The README's demo is a test too: it exits 0 only if a Pod in east got west's answer.
step "demo (the guide's walk-through, end to end)" bash scripts/demo.sh
trap - EXIT

printf '\nall tests passed in %ss\n' "$(( $(date +%s) - total_start ))"
