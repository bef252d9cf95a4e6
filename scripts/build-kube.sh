#!/usr/bin/env bash
# Builds kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy, kubelet, kubectl (k8s.io/kubernetes) and etcd
# from their Go modules through the Go module proxy, into a cache outside the repository.
# Rebuilt only when a pin in versions.env changes. Prints nothing else on a cache hit.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache=${STRAIT_CACHE:-/var/cache/strait}
out="$cache/kube/${KUBE_VERSION}-etcd-${ETCD_VERSION}"
bins=(kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl etcd)
log() { printf '[build-kube] %s\n' "$*"; }

ok=1
for b in "${bins[@]}"; do [ -x "$out/bin/$b" ] || ok=0; done
if [ $ok = 1 ]; then
  log "Kubernetes $KUBE_VERSION and etcd $ETCD_VERSION present in $out/bin"
  exit 0
fi

command -v go >/dev/null || { echo "build-kube: Go is required (https://go.dev/dl); none on PATH" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
mkdir -p "$out/bin" "$cache/kube/src"

# --- Kubernetes --------------------------------------------------------------------------------
# k8s.io/kubernetes refers to its staging modules through relative `replace`s, which do not apply
# when it is a dependency; a throw-away module pins each of them at the matching v0.X.Y instead.
minor=${KUBE_VERSION#v1.}
staging="v0.${minor}"
work="$cache/kube/src/kubernetes-${KUBE_VERSION}"
rm -rf "$work" && mkdir -p "$work"
cd "$work"
log "resolving k8s.io/kubernetes@$KUBE_VERSION"
gomod=$(go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')
{
  echo "module strait.local/kubebuild"
  echo
  echo "go $(go env GOVERSION | sed 's/^go//; s/^\([0-9]*\.[0-9]*\).*/\1/').0"
  echo
  echo "require k8s.io/kubernetes ${KUBE_VERSION}"
  echo
  grep -E '^\s*k8s\.io/[a-z0-9-]+ => \./staging/' "$gomod" | awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}'
} > go.mod
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ldflags="$ldflags -X $pkg.gitVersion=${KUBE_VERSION} -X $pkg.gitMajor=1 -X $pkg.gitMinor=${minor%%.*}"
  ldflags="$ldflags -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
done
for b in kube-apiserver kube-controller-manager kube-scheduler kube-proxy kubelet kubectl; do
  # (A binary added to the list is built alone on a machine that has the others.)
  [ -x "$out/bin/$b" ] && continue
  log "building $b $KUBE_VERSION (cold builds take several minutes)"
  go build -trimpath -ldflags "$ldflags" -o "$out/bin/$b.tmp" "k8s.io/kubernetes/cmd/$b"
  mv "$out/bin/$b.tmp" "$out/bin/$b"
done

# --- etcd --------------------------------------------------------------------------------------
if [ -x "$out/bin/etcd" ]; then
  log "built into $out/bin"
  exit 0
fi
work="$cache/kube/src/etcd-${ETCD_VERSION}"
rm -rf "$work" && mkdir -p "$work"
cd "$work"
printf 'module strait.local/etcdbuild\n\ngo 1.24\n\nrequire go.etcd.io/etcd/server/v3 %s\n' "$ETCD_VERSION" > go.mod
log "building etcd $ETCD_VERSION"
go build -trimpath -ldflags "-s -w" -o "$out/bin/etcd.tmp" go.etcd.io/etcd/server/v3
mv "$out/bin/etcd.tmp" "$out/bin/etcd"
log "built into $out/bin"
