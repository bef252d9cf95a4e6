#!/usr/bin/env bash
# One idempotent step that installs everything Strait's build, tests and demo need on a fresh
# Debian machine (run as root). When everything is present it only checks and returns.
#   - Debian packages: LLVM (for bpf-linker), bpftool, iproute2, nftables, iptables, iperf3, tcpdump ...
#   - rustup toolchains: pinned stable (user space) and pinned nightly + rust-src (eBPF)
#   - bpf-linker built against Debian's LLVM
#   - kube-apiserver, kube-controller-manager, kube-proxy, kubelet, kubectl and etcd built from their
#     Go modules; containerd, CoreDNS and the Pod sandbox (pause) too (build-node.sh); flanneld
#     and the flannel CNI plugin for the testbed's Flannel member (build-flannel.sh)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

log() { printf '[setup] %s\n' "$*"; }

if [ "$(id -u)" != 0 ]; then
  echo "setup: must run as root (it installs packages and loads eBPF programs)" >&2
  exit 1
fi

# --- Debian packages -------------------------------------------------------------------------
apt_pkgs=(
  "llvm-${LLVM_MAJOR}-dev" "libpolly-${LLVM_MAJOR}-dev" zlib1g-dev libzstd-dev
  build-essential pkg-config ca-certificates curl git jq
  bpftool iproute2 iputils-ping nftables iptables iperf3 tcpdump conntrack ethtool procps psmisc openssl
  # Images and real Nodes: buildah builds the images without a daemon; runc runs the Nodes'
  # containers (crun refuses hybrid cgroup layouts); the standard CNI plugins; busybox and socat
  # for the test images.
  buildah runc containernetworking-plugins busybox-static socat
  # The look-alikes of the MCS API conformance suite's images (BIND nslookup, OpenBSD nc).
  dash bind9-dnsutils netcat-openbsd
)
missing=()
for p in "${apt_pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "Debian packages present"
fi

# --- Rust toolchains -------------------------------------------------------------------------
if ! command -v rustup >/dev/null 2>&1; then
  if [ -x "$HOME/.cargo/bin/rustup" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  else
    log "installing rustup"
    curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --default-toolchain none
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
fi
have_tc() { rustup toolchain list | grep -q "^$1"; }
if ! have_tc "$RUST_STABLE"; then
  log "installing Rust $RUST_STABLE"
  rustup toolchain install "$RUST_STABLE" --profile minimal -c rustfmt -c clippy
fi
if ! have_tc "$RUST_NIGHTLY" || ! rustup component list --toolchain "$RUST_NIGHTLY" --installed | grep -q rust-src; then
  log "installing Rust $RUST_NIGHTLY with rust-src (eBPF)"
  rustup toolchain install "$RUST_NIGHTLY" --profile minimal -c rust-src -c clippy -c rustfmt
fi

# --- bpf-linker ------------------------------------------------------------------------------
if ! bpf-linker --version 2>/dev/null | grep -q "$BPF_LINKER_VERSION"; then
  log "building bpf-linker $BPF_LINKER_VERSION against LLVM $LLVM_MAJOR"
  LLVM_PREFIX="/usr/lib/llvm-${LLVM_MAJOR}" PATH="/usr/lib/llvm-${LLVM_MAJOR}/bin:$PATH" \
    cargo "+$RUST_STABLE" install bpf-linker --version "$BPF_LINKER_VERSION" --locked \
      --no-default-features --features "llvm-${LLVM_MAJOR}"
else
  log "bpf-linker $BPF_LINKER_VERSION present"
fi

# --- Kubernetes and etcd from source -----------------------------------------------------------
"$here/build-kube.sh"
"$here/build-node.sh"
"$here/build-flannel.sh"
"$here/build-helm.sh"
log "done"
