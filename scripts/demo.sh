#!/usr/bin/env bash
# The demo command (README). As root, on a fresh machine:
#   sudo bash scripts/demo.sh [--keep]
# installs what is missing, builds Strait, brings up a local ClusterSet (real kube-apiservers for
# north, east and west, Strait's controllers, two Nodes per cluster with kube-proxy and
# mc-agent), then walks the user guide's story: east and west join north's ClusterSet, each
# elects a gateway, west exports its nginx Service, east imports it, and a Pod in east gets an
# answer from the Pod in west through kube-proxy, both gateways and the Geneve tunnel. Exits 0
# only if the answer really came from west.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source scripts/env.sh
export RUST_BACKTRACE=0
keep=0
[ "${1:-}" = "--keep" ] && keep=1

bold() { printf '\033[1m%s\033[0m\n' "$*"; }
say() { printf '\n'; bold "==> $*"; current_step="$*"; }
logs="target/testbed/logs"
current_step="start"
trap 'echo "demo failed during: $current_step (exit $?). Logs: $logs/ (one per process); clean up with: cargo xtask testbed down" >&2' ERR

say "Installing what is missing (toolchains, bpf-linker, Kubernetes built from source; cached after the first run)"
bash scripts/setup.sh

say "Building Strait (controllers, agent, and the eBPF programs the agent embeds)"
cargo build --quiet -p mc-controller -p mc-agent -p mcctl -p xtask
agent="$CARGO_TARGET_DIR/debug/mc-agent"
mcctl_bin="$CARGO_TARGET_DIR/debug/mcctl"

say "Starting three clusters: north (leader), east and west (members), each with two Nodes"
echo "    (one etcd; per cluster a kube-apiserver, kube-controller-manager and Strait's controller;"
echo "     per Node a network namespace, kube-proxy and mc-agent. Takes about a minute.)"
cargo xtask testbed down >/dev/null 2>&1 || true
cargo xtask testbed up | sed 's/^/    /'
source target/testbed/env
k() { local c=$1; shift; local kc="KUBECONFIG_${c^^}"; "$KUBECTL" --kubeconfig "${!kc}" "$@"; }
mcctl() { local c=$1; shift; local kc="KUBECONFIG_${c^^}"; "$mcctl_bin" --kubeconfig "${!kc}" "$@"; }
work=target/testbed/demo
mkdir -p "$work"

wait_for() {  # wait_for <what> <seconds> <command...>
  local what=$1 secs=$2; shift 2
  printf '    waiting for %s ' "$what"
  for _ in $(seq 1 $((secs * 2))); do
    if "$@" >/dev/null 2>&1; then echo "- ok"; return 0; fi
    printf '.'; sleep 0.5
  done
  echo "- gave up after ${secs}s"
  return 1
}

say "North becomes the leader: mcctl init creates ClusterSet test-clusterset in antrea-multicluster"
mcctl north init -n antrea-multicluster --clusterset test-clusterset --clusterid test-cluster-north \
  -j "$work/join-config.yaml" | sed 's/^/    /'

for m in east west; do
  say "A token for $m in north (mcctl create membertoken: ServiceAccount bound to test-cluster-$m, RoleBinding, token Secret)"
  mcctl north create membertoken "member-$m" -n antrea-multicluster --cluster-id "test-cluster-$m" \
    -o "$work/$m-token.yaml" | sed 's/^/    /'
  say "$m joins with the join config and its token (mcctl join waits until the leader accepts it)"
  mcctl "$m" join -f "$work/join-config.yaml" --clusterid "test-cluster-$m" \
    --token-secret-file "$work/$m-token.yaml" | sed 's/^/    /'
done

say "The ClusterSet: east and west joined north"
bold "north (leader): mcctl get clusterset -n antrea-multicluster"
mcctl north get clusterset -n antrea-multicluster
bold "north (leader): kubectl get clusterset -n antrea-multicluster"
k north get clusterset -n antrea-multicluster
bold "east (member): kubectl get clusterset -n kube-system"
k east get clusterset -n kube-system

say "Gateways: node-a of each member is annotated multicluster.antrea.io/gateway=true and Ready"
for c in east west; do
  bold "$c: kubectl annotate node node-a multicluster.antrea.io/gateway=true"
  k "$c" annotate node node-a multicluster.antrea.io/gateway=true --overwrite | sed 's/^/    /'
done
wait_for "east's Gateway" 60 k east get gateway node-a -n kube-system
wait_for "west's Gateway" 60 k west get gateway node-a -n kube-system
wait_for "east's ClusterInfoImport from west" 60 bash -c "$(declare -f k); KUBECTL=$KUBECTL KUBECONFIG_EAST=$KUBECONFIG_EAST k east get clusterinfoimport -n kube-system -o name | grep -q ."
for c in east west; do
  bold "$c: kubectl get gateway,clusterinfoimport -n kube-system"
  k "$c" get gateway,clusterinfoimport -n kube-system
done

say "West runs an nginx stand-in: a Pod on node-b answering HTTP, and a Service nginx in front of it"
cargo xtask testbed pod add west node-b nginx-0 --label app=nginx --serve-http 8080 | sed 's/^/    /'
k west apply -f - <<'YAML'
apiVersion: v1
kind: Service
metadata:
  name: nginx
  namespace: default
spec:
  selector:
    app: nginx
  ports:
    - {name: http, port: 80, targetPort: 8080, protocol: TCP}
YAML

say "West exports it with the guide's ServiceExport, unchanged"
k west apply -f tests/fixtures/guides/001-L224-serviceexport.yaml
wait_for "the import in east (ServiceImport nginx, Service antrea-mc-nginx with an endpoint)" 60 \
  bash -c "$(declare -f k); KUBECTL=$KUBECTL KUBECONFIG_EAST=$KUBECONFIG_EAST k east get endpoints antrea-mc-nginx -n default -o jsonpath='{.subsets[0].addresses[0].ip}' | grep -q ."
bold "north: kubectl get resourceexport,resourceimport -n antrea-multicluster"
k north get resourceexport,resourceimport -n antrea-multicluster
bold "east: kubectl get serviceimport,service,endpoints -n default"
k east get serviceimport,service,endpoints -n default

say "A Pod in east (on node-b, a regular Node) asks antrea-mc-nginx"
cargo xtask testbed pod add east node-b client | sed 's/^/    /'
ip=$(k east get service antrea-mc-nginx -n default -o jsonpath='{.spec.clusterIP}')
echo "    curl http://$ip/   (antrea-mc-nginx's ClusterIP in east)"
answer=""
for _ in $(seq 1 20); do
  answer=$(cargo xtask testbed exec east/client -- curl -sS -m 3 "http://$ip/" 2>/dev/null || true)
  [ -n "$answer" ] && break
  sleep 1
done
bold "    answer: ${answer:-<none>}"
if [ "$answer" != "hello from west/nginx-0" ]; then
  echo "the request did not get the answer of west's Pod (expected 'hello from west/nginx-0')." >&2
  echo "Look at $logs/east-node-b-mc-agent.log, $logs/east-node-a-mc-agent.log, $logs/west-node-a-mc-agent.log" >&2
  exit 1
fi
echo "    The path: east/node-b kube-proxy DNAT to west's nginx ClusterIP -> Geneve to east's gateway"
echo "    (node-a) -> SNAT to east's gateway IP -> Geneve to west's gateway -> kube-proxy DNAT to the"
echo "    Pod on west/node-b; the reply retraces it."

say "What each Node's agent counted (mc-agent counters; non-zero verdicts only)"
for n in east/node-b east/node-a west/node-a west/node-b; do
  bold "$n"
  cargo xtask testbed exec "$n" -- "$agent" counters | awk 'NR == 1 || $2 > 0' | sed 's/^/    /'
done

say "East's gateway dataplane, decoded from its pinned maps (mc-agent maps)"
cargo xtask testbed exec east/node-a -- "$agent" maps | sed 's/^/    /'

if [ $keep = 1 ]; then
  cat <<MSG

Everything is still up. Try:
  source target/testbed/env
  \$KUBECTL --kubeconfig \$KUBECONFIG_NORTH get clusterset,resourceexport,resourceimport -n antrea-multicluster
  \$KUBECTL --kubeconfig \$KUBECONFIG_EAST get gateway,clusterinfoimport -n kube-system
  $mcctl_bin --kubeconfig \$KUBECONFIG_NORTH get clusterset -n antrea-multicluster
  $mcctl_bin --kubeconfig \$KUBECONFIG_NORTH get resourceexport --cluster-id test-cluster-west
  cargo xtask testbed exec east/client -- curl -s http://$ip/
  cargo xtask testbed exec east/node-a -- bpftool map dump pinned /sys/fs/bpf/mc/v1/mc_snat
  cargo xtask testbed exec east/node-a -- $agent maps
  cargo xtask testbed node ready east node-a false      # the gateway moves to node-b? (only node-a is a candidate)
  cargo xtask testbed status
Logs: $logs/. Remove it all with: cargo xtask testbed down
MSG
else
  say "Taking the testbed down (run with --keep to leave it up)"
  cargo xtask testbed down | sed 's/^/    /'
fi
say "Demo complete: a Pod in east reached a Service exported from west"
