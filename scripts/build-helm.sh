#!/usr/bin/env bash
# Builds helm (helm.sh/helm/v3) from its Go module through the Go module proxy, into a cache
# outside the repository; rebuilt only when HELM_VERSION in versions.env changes. CI renders the
# chart in deploy/chart with it.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache=${STRAIT_CACHE:-/var/cache/strait}
out="$cache/helm/${HELM_VERSION}"
log() { printf '[build-helm] %s\n' "$*"; }

if [ -x "$out/helm" ]; then
  log "helm $HELM_VERSION present in $out"
  exit 0
fi
command -v go >/dev/null || { echo "build-helm: Go is required; none on PATH" >&2; exit 1; }
export GOTOOLCHAIN=local CGO_ENABLED=0
mkdir -p "$out"
log "building helm $HELM_VERSION (a cold build takes a few minutes)"
GOBIN="$out/tmp" go install -trimpath \
  -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=${HELM_VERSION}" \
  "helm.sh/helm/v3/cmd/helm@${HELM_VERSION}"
mv "$out/tmp/helm" "$out/helm"
rmdir "$out/tmp"
log "built $out/helm"
