# Sourced by the scripts: toolchain PATH and the cargo cache outside the repository.
# shellcheck shell=bash
export PATH="$HOME/.cargo/bin:$PATH"
# Cargo's build cache lives outside the clone, one per checkout path: a new clone at the same
# path (CI) reuses it, and two checkouts never run each other's binaries (cargo only copies a
# binary to target/debug/ when it rebuilds it).
_strait_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${STRAIT_CACHE:-/var/cache/strait}/cargo-target/$(basename "$_strait_root")-$(printf %s "$_strait_root" | sha256sum | cut -c1-12)}"
# A fresh clone gains nothing from incremental artefacts (several GiB): off unless asked for.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# shellcheck source=versions.env
source "$(dirname "${BASH_SOURCE[0]}")/versions.env"
