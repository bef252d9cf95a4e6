#!/usr/bin/env bash
# Builds what a testbed Node runs besides the kubelet (built by build-kube.sh): containerd and its
# runc shim (github.com/containerd/containerd/v2), CoreDNS (github.com/coredns/coredns), all from
# their Go modules, and the Pod sandbox's `pause` from the pinned Kubernetes source (its
# build/pause/linux/pause.c). Into a cache outside the repository; rebuilt only when a pin in
# versions.env changes. runc and the CNI plugins are Debian's (setup.sh installs them).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache=${STRAIT_CACHE:-/var/cache/strait}
out="$cache/node/containerd-${CONTAINERD_VERSION}-coredns-${COREDNS_VERSION}-pause-${PAUSE_VERSION}"
bins=(containerd containerd-shim-runc-v2 ctr coredns pause)
log() { printf '[build-node] %s\n' "$*"; }

ok=1
for b in "${bins[@]}"; do [ -x "$out/bin/$b" ] || ok=0; done
if [ $ok = 1 ]; then
  log "containerd $CONTAINERD_VERSION, CoreDNS $COREDNS_VERSION and pause $PAUSE_VERSION present in $out/bin"
  exit 0
fi
command -v go >/dev/null || { echo "build-node: Go is required; none on PATH" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0
mkdir -p "$out/bin" "$out/tmp"

# containerd without cgo: the btrfs snapshotter drops out (overlayfs is what the Nodes use).
ctrd=github.com/containerd/containerd/v2
for b in containerd containerd-shim-runc-v2 ctr; do
  [ -x "$out/bin/$b" ] && continue
  log "building $b $CONTAINERD_VERSION (a cold build takes a few minutes)"
  GOBIN="$out/tmp" go install -trimpath -tags "urfave_cli_no_docs no_btrfs" \
    -ldflags "-s -w -X $ctrd/version.Version=${CONTAINERD_VERSION} -X $ctrd/version.Package=$ctrd" \
    "$ctrd/cmd/$b@${CONTAINERD_VERSION}"
  mv "$out/tmp/$b" "$out/bin/$b"
done

if [ ! -x "$out/bin/coredns" ]; then
  log "building coredns $COREDNS_VERSION"
  GOBIN="$out/tmp" go install -trimpath -ldflags "-s -w" "github.com/coredns/coredns@${COREDNS_VERSION}"
  mv "$out/tmp/coredns" "$out/bin/coredns"
fi

if [ ! -x "$out/bin/pause" ]; then
  log "building pause $PAUSE_VERSION from k8s.io/kubernetes@$KUBE_VERSION"
  src=$(cd "$out/tmp" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" |
    sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  gcc -Os -static -Wall -Werror -DVERSION="v${PAUSE_VERSION}-strait" \
    -o "$out/tmp/pause" "$src/build/pause/linux/pause.c"
  strip "$out/tmp/pause"
  mv "$out/tmp/pause" "$out/bin/pause"
fi
rmdir "$out/tmp" 2>/dev/null || true
log "built into $out/bin"
