//! Rebuild when bpf-linker changes: building this crate depends on that binary, which cargo
//! cannot see.
fn main() {
    match which::which("bpf-linker") {
        Ok(path) => println!("cargo:rerun-if-changed={}", path.display()),
        Err(err) => println!("cargo:warning=bpf-linker not found ({err}); run scripts/setup.sh"),
    }
}
