# Sourced by the scripts: toolchain PATH and the cargo cache outside the repository.
# shellcheck shell=bash
export PATH="$HOME/.cargo/bin:$PATH"
# Cargo's build cache lives outside the clone so a fresh clone (CI) reuses earlier builds.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${STRAIT_CACHE:-/var/cache/strait}/cargo-target}"
export CARGO_TERM_COLOR="${CARGO_TERM_COLOR:-never}"
# shellcheck source=versions.env
source "$(dirname "${BASH_SOURCE[0]}")/versions.env"
