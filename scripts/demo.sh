#!/usr/bin/env bash
# The demo command (README). As root, on a fresh machine:
#   sudo bash scripts/demo.sh [--keep]
# installs what is missing, builds Strait, brings up the local testbed (real kube-apiservers for
# north, east and west), shows Strait's CRDs served by all three, then loads Strait's eBPF
# program on a Node-like network namespace and shows its counters move with real traffic.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/env.sh
keep=0
[ "${1:-}" = "--keep" ] && keep=1

say() { printf '\n\033[1m==> %s\033[0m\n' "$*"; current_step="$*"; }
logs="target/testbed/logs"
current_step="start"
trap 'echo "demo failed during: $current_step (exit $?). Logs: $logs/; clean up with: cargo xtask testbed down" >&2' ERR

say "Installing what is missing (toolchains, bpf-linker, Kubernetes built from source; cached)"
bash scripts/setup.sh

say "Building Strait (the eBPF object is built by mc-agent's build.rs and embedded)"
cargo build --quiet -p mc-agent -p xtask
agent="$CARGO_TARGET_DIR/debug/mc-agent"

say "Bringing up the testbed: etcd + kube-apiserver + kube-controller-manager for north, east, west"
if ! cargo xtask testbed up; then
  echo "testbed failed to come up; logs are in $logs/" >&2
  exit 1
fi
source target/testbed/env

say "Strait's CRDs, served by each cluster's API server"
for c in north east west; do
  kc="KUBECONFIG_${c^^}"
  echo "--- $c (${!kc})"
  "$KUBECTL" --kubeconfig "${!kc}" get crd -o custom-columns='CRD:.metadata.name,VERSIONS:.spec.versions[*].name,SCOPE:.spec.scope' \
    | grep -E 'CRD|antrea.io|x-k8s.io'
done

say "The leader's ClusterClaims and ClusterSet from the user guide, applied unchanged to north"
"$KUBECTL" --kubeconfig "$KUBECONFIG_NORTH" create namespace antrea-multicluster --dry-run=client -o yaml \
  | "$KUBECTL" --kubeconfig "$KUBECONFIG_NORTH" apply -f - >/dev/null
"$KUBECTL" --kubeconfig "$KUBECONFIG_NORTH" apply -f tests/fixtures/guides/000-L249-clusterclaim-clusterclaim-clusterset.yaml
"$KUBECTL" --kubeconfig "$KUBECONFIG_NORTH" get clusterclaim,clusterset -n antrea-multicluster
echo "(the ClusterSet's totals stay empty until the controllers of the next milestone run)"

say "The eBPF dataplane: mc-agent attaches its TC program (TCX) to a Node's uplink"
ns_a=strait-demo-node ns_b=strait-demo-peer
bpffs=/run/strait-demo/bpffs
demo_cleanup() {
  ip netns del "$ns_a" 2>/dev/null || true
  ip netns del "$ns_b" 2>/dev/null || true
  umount "$bpffs" 2>/dev/null || true
}
demo_cleanup
ip netns add "$ns_a"; ip netns add "$ns_b"
ip link add uplink0 netns "$ns_a" type veth peer peer0 netns "$ns_b"
ip -n "$ns_a" addr add 198.18.200.1/30 dev uplink0; ip -n "$ns_a" link set uplink0 up
ip -n "$ns_b" addr add 198.18.200.2/30 dev peer0;  ip -n "$ns_b" link set peer0 up
mkdir -p "$bpffs"; mount -t bpf bpf "$bpffs"   # the Node's own bpffs
pin="$bpffs/mc/v1"
nsenter --net=/run/netns/"$ns_a" "$agent" --pin-root "$pin" attach --uplink uplink0
echo "counters before traffic:"
"$agent" --pin-root "$pin" counters
nsenter --net=/run/netns/"$ns_a" ping -c 5 -i 0.2 198.18.200.2 | tail -2
echo "counters after 5 pings:"
"$agent" --pin-root "$pin" counters
moved=$("$agent" --pin-root "$pin" counters --json | jq '.[] | select(.name == "pass_ipv4") | .packets')
if [ "${moved:-0}" -lt 10 ]; then
  echo "the IPv4 counter should have counted 5 requests and 5 replies, it shows ${moved:-0}" >&2
  exit 1
fi
echo "the same map, as bpftool shows it (named fields from BTF; keys 0-3, one value per CPU):"
bpftool -j map dump pinned "$pin/mc_counters" | jq -c '.[] | select(.formatted.key < 4) | .formatted'

if [ $keep = 1 ]; then
  cat <<MSG

Everything is still up. Try:
  source target/testbed/env
  \$KUBECTL --kubeconfig \$KUBECONFIG_NORTH get clusterset -A
  bpftool map dump pinned $pin/mc_counters
  $agent --pin-root $pin counters
Remove it all with: cargo xtask testbed down; ip netns del $ns_a; ip netns del $ns_b; umount $bpffs
MSG
else
  demo_cleanup
  cargo xtask testbed down
fi
say "Demo complete"
