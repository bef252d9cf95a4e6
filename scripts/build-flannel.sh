#!/usr/bin/env bash
# Builds Flannel for the testbed's Flannel member (docs/design.md §5): flanneld from its Go module
# (github.com/flannel-io/flannel) and the `flannel` CNI meta-plugin from
# github.com/containernetworking/plugins at its last release that carried it (the separate
# flannel-io/cni-plugin module is not served here); the plugin delegates to Debian's `bridge` and
# `host-local`. Into a cache outside the repository; rebuilt only when a pin in versions.env
# changes.
#
# flanneld is built from a copy of its module with two backends left out, as the testbed runs
# only VXLAN: `tencentvpc` (its SDK module is not served here) and `udp` (it needs cgo).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache=${STRAIT_CACHE:-/var/cache/strait}
out="$cache/flannel/${FLANNEL_VERSION}-cni-${FLANNEL_CNI_VERSION}"
log() { printf '[build-flannel] %s\n' "$*"; }

if [ -x "$out/bin/flanneld" ] && [ -x "$out/bin/flannel" ]; then
  log "flanneld $FLANNEL_VERSION and the flannel CNI plugin $FLANNEL_CNI_VERSION present in $out/bin"
  exit 0
fi
command -v go >/dev/null || { echo "build-flannel: Go is required; none on PATH" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0
rm -rf "$out/tmp"
mkdir -p "$out/bin" "$out/tmp"

if [ ! -x "$out/bin/flannel" ]; then
  log "building the flannel CNI plugin $FLANNEL_CNI_VERSION"
  GOBIN="$out/tmp" go install -trimpath -ldflags "-s -w" \
    "github.com/containernetworking/plugins/plugins/meta/flannel@${FLANNEL_CNI_VERSION}"
  mv "$out/tmp/flannel" "$out/bin/flannel"
fi

if [ ! -x "$out/bin/flanneld" ]; then
  log "building flanneld $FLANNEL_VERSION (VXLAN, host-gw, IPIP, IPsec, WireGuard backends)"
  src=$(cd "$out/tmp" && GOFLAGS=-mod=mod go mod download -json "github.com/flannel-io/flannel@${FLANNEL_VERSION}" |
    sed -n 's/.*"Dir": "\(.*\)".*/\1/p')
  cp -r "$src" "$out/tmp/flannel"
  chmod -R u+w "$out/tmp/flannel"
  (
    cd "$out/tmp/flannel"
    sed -i -e '/pkg\/backend\/tencentvpc"/d' -e '/pkg\/backend\/udp"/d' main.go
    rm -rf pkg/backend/tencentvpc
    GOFLAGS=-mod=mod go build -trimpath \
      -ldflags "-s -w -X github.com/flannel-io/flannel/pkg/version.Version=${FLANNEL_VERSION}" \
      -o "$out/bin/flanneld" .
  )
fi
rm -rf "$out/tmp"
log "built into $out/bin"
