#![no_std]
// The library target exists so mc-agent can declare a build-dependency on this crate (cargo then
// rebuilds the agent when the programs change). The programs are in the `mc-ebpf` binary.
