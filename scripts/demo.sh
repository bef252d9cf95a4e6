#!/usr/bin/env bash
# The demo command (README). As root, on a fresh machine:
#   bash scripts/demo.sh [--keep]      (as root; no sudo needed)
# installs what is missing, builds Strait and its images, brings up a local ClusterSet (real
# kube-apiservers for north, east and west; two real Nodes per cluster, each a kubelet with
# containerd, kube-proxy and CoreDNS; Strait installed in-cluster from deploy/ and the Helm chart),
# then walks the user guide's story: east and west join north's ClusterSet, each elects a gateway,
# west exports its nginx Service, east imports it, and a container in east gets an answer from a
# container in west through CoreDNS, kube-proxy, both gateways and the Geneve tunnel. Exits 0 only
# if the answer really came from west.
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

say "Building Strait (mcctl, the testbed's tasks) and its images (controller, agent with the eBPF programs it embeds)"
cargo build --quiet -p mcctl -p xtask
mcctl_bin="$CARGO_TARGET_DIR/debug/mcctl"
cargo xtask image build | sed 's/^/    /'

say "Starting three clusters: north (leader), east and west (members), each with two kubelet Nodes"
echo "    (one etcd; per cluster a kube-apiserver, controller-manager and scheduler; per Node a network"
echo "     namespace with containerd, a kubelet and kube-proxy; CoreDNS; Strait from its images:"
echo "     kubectl apply -k deploy/leader, deploy/member, deploy/agent, and in west helm install.)"
cargo xtask testbed down >/dev/null 2>&1 || true
cargo xtask testbed up | sed 's/^/    /'
source target/testbed/env
k() { local c=$1; shift; local kc="KUBECONFIG_${c^^}"; "$KUBECTL" --kubeconfig "${!kc}" "$@"; }
tools_image=$(cargo xtask image list | awk '$1 == "test-tools" {print $2}')   # the testbed's Pod image
# The agent Pod on a Node (the DaemonSet's).
agent_pod() { k "$1" -n kube-system get pods -l app=strait-agent --field-selector "spec.nodeName=$2" -o name | head -1; }

say "What runs in east: kubectl get pods -A -o wide"
echo "    (the controller and CoreDNS are Ready; the agents become Ready once east has joined and elected its Gateway)"
k east get pods -A -o wide
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

say "West runs an nginx stand-in: a container on node-b answering HTTP, and a Service nginx in front of it"
k west apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: nginx-0
  namespace: default
  labels: {app: nginx}
spec:
  nodeName: node-b
  containers:
    - name: web
      image: $tools_image
      imagePullPolicy: Never
      command: [strait-test-server, --port, "8080", --answer, hello from west/nginx-0]
      readinessProbe: {tcpSocket: {port: 8080}, periodSeconds: 1}
---
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
k west wait --for=condition=Ready pod/nginx-0 -n default --timeout=120s | sed 's/^/    /'

say "West exports it with the guide's ServiceExport, unchanged"
k west apply -f tests/fixtures/guides/001-L224-serviceexport.yaml
wait_for "the import in east (ServiceImport nginx, Service antrea-mc-nginx with an endpoint)" 60 \
  bash -c "$(declare -f k); KUBECTL=$KUBECTL KUBECONFIG_EAST=$KUBECONFIG_EAST k east get endpoints antrea-mc-nginx -n default -o jsonpath='{.subsets[0].addresses[0].ip}' | grep -q ."
bold "north: kubectl get resourceexport,resourceimport -n antrea-multicluster"
k north get resourceexport,resourceimport -n antrea-multicluster
bold "east: kubectl get serviceimport,service,endpoints -n default"
k east get serviceimport,service,endpoints -n default

say "A container in east (on node-b, a regular Node) asks antrea-mc-nginx by name"
k east apply -f - <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: client
  namespace: default
spec:
  nodeName: node-b
  containers:
    - {name: client, image: $tools_image, imagePullPolicy: Never, command: [sleep, "3600"]}
YAML
k east wait --for=condition=Ready pod/client -n default --timeout=120s | sed 's/^/    /'
url="http://antrea-mc-nginx.default.svc.cluster.local/"
echo "    kubectl exec client -- curl $url   (CoreDNS gives antrea-mc-nginx's ClusterIP in east)"
answer=""
for _ in $(seq 1 20); do
  answer=$(k east exec client -n default -- curl -sS -m 3 "$url" 2>/dev/null || true)
  [ -n "$answer" ] && break
  sleep 1
done
bold "    answer: ${answer:-<none>}"
if [ "$answer" != "hello from west/nginx-0" ]; then
  echo "the request did not get the answer of west's Pod (expected 'hello from west/nginx-0')." >&2
  echo "Look at the agents: kubectl -n kube-system logs ds/strait-agent (in east and west), and $logs/" >&2
  exit 1
fi
echo "    The path: CoreDNS -> east/node-b kube-proxy DNAT to west's nginx ClusterIP -> Geneve to east's"
echo "    gateway (node-a) -> SNAT to east's gateway IP -> Geneve to west's gateway -> kube-proxy DNAT"
echo "    to the container on west/node-b; the reply retraces it."

say "What each Node's agent counted (kubectl exec into the agent Pod: mc-agent counters; non-zero only)"
for n in east/node-b east/node-a west/node-a west/node-b; do
  c=${n%/*} node=${n#*/}
  bold "$n ($(agent_pod "$c" "$node"))"
  k "$c" -n kube-system exec "$(agent_pod "$c" "$node")" -- mc-agent counters | awk 'NR == 1 || $2 > 0' | sed 's/^/    /'
done

say "East's gateway dataplane, decoded from its pinned maps (mc-agent maps in the agent Pod on node-a)"
k east -n kube-system exec "$(agent_pod east node-a)" -- mc-agent maps | sed 's/^/    /'

say "What runs in east now: kubectl get pods -A -o wide"
k east get pods -A -o wide

if [ $keep = 1 ]; then
  cat <<MSG

Everything is still up. Try:
  source target/testbed/env
  \$KUBECTL --kubeconfig \$KUBECONFIG_NORTH get clusterset,resourceexport,resourceimport -n antrea-multicluster
  \$KUBECTL --kubeconfig \$KUBECONFIG_EAST get pods -A -o wide
  \$KUBECTL --kubeconfig \$KUBECONFIG_EAST get gateway,clusterinfoimport -n kube-system
  \$KUBECTL --kubeconfig \$KUBECONFIG_EAST exec client -- curl -s $url
  \$KUBECTL --kubeconfig \$KUBECONFIG_EAST -n kube-system exec $(agent_pod east node-a) -- bpftool map dump pinned /sys/fs/bpf/mc/v1/mc_snat
  \$KUBECTL --kubeconfig \$KUBECONFIG_EAST -n kube-system logs deploy/antrea-mc-controller
  $mcctl_bin --kubeconfig \$KUBECONFIG_NORTH get clusterset -n antrea-multicluster
  $mcctl_bin --kubeconfig \$KUBECONFIG_NORTH get resourceexport --cluster-id test-cluster-west
  cargo xtask testbed node stop east node-a      # its kubelet: the Node goes NotReady, east loses its gateway
  cargo xtask testbed status
Logs of the testbed's processes: $logs/. Remove it all with: cargo xtask testbed down
MSG
else
  say "Taking the testbed down (run with --keep to leave it up)"
  cargo xtask testbed down | sed 's/^/    /'
fi
say "Demo complete: a container in east reached a Service exported from west"
