//! What the testbed's tests need before they start, checked in one place: the testbed
//! (`target/testbed/env`, written by `cargo xtask testbed up`) and root (the tests enter the
//! testbed's network namespaces, signal its processes and run `cargo xtask testbed` commands).
//! Every test starts by getting the testbed (`Testbed::from_env` or
//! `kubelet_nodes`), and both call [`require`] first.
//!
//! Without one of them a plain `cargo test` passes and says what it left out: the test binary
//! ends at once, successfully, after one line on stderr such as
//! `skipped: every test of crds: no testbed (start it with `cargo xtask testbed up`)`. (The test
//! harness cannot skip a single test at run time, and every test here needs both.) Where
//! [`REQUIRE_VAR`] names the missing prerequisite it panics instead, as before: the test command
//! (scripts/test.sh) sets `STRAIT_TEST_REQUIRE=root,testbed`, so in CI nothing is skipped
//! silently. mc-agent's kernel tests read the same variable (mc-agent/tests/support).

use std::{io::Write as _, path::Path, sync::OnceLock};

pub use crate::require::REQUIRE_VAR;
use crate::require::required;

/// A prerequisite that is not there: its name in [`REQUIRE_VAR`] and what to tell the user.
struct Missing {
    name: &'static str,
    reason: String,
}

/// Returns when the tests may run: the testbed is there and this process is root. Otherwise
/// ends this test binary successfully after saying why on stderr, or panics where
/// [`REQUIRE_VAR`] names what is missing. Checked once per process.
pub fn require() {
    static MISSING: OnceLock<Vec<Missing>> = OnceLock::new();
    let missing = MISSING.get_or_init(missing);
    let Some(first) = missing.first() else {
        return;
    };
    // Every missing one is weighed: a required one fails even when another is missing too.
    if let Some(m) = missing.iter().find(|m| required(m.name)) {
        panic!("{}; {REQUIRE_VAR} names {}", m.reason, m.name);
    }
    // Straight to stderr: the harness captures `eprintln!` and shows it only for failed tests.
    let _ = writeln!(
        std::io::stderr(),
        "skipped: every test of {}: {}",
        binary_name(),
        first.reason
    );
    std::process::exit(0);
}

/// The prerequisites missing: the testbed's env file (readable), root.
fn missing() -> Vec<Missing> {
    let mut missing = Vec::new();
    let env = testbed::paths::testbed_dir().join("env");
    if let Err(e) = std::fs::File::open(&env) {
        missing.push(Missing {
            name: "testbed",
            reason: format!(
                "no testbed (start it with `cargo xtask testbed up`): {}: {e}",
                env.display()
            ),
        });
    }
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        missing.push(Missing {
            name: "root",
            reason: "needs root (the tests enter the testbed's network namespaces, signal its \
                     processes and run `cargo xtask testbed` commands)"
                .to_owned(),
        });
    }
    missing
}

/// This test binary's name as cargo shows it (`crds` for `crds-0123456789abcdef`).
fn binary_name() -> String {
    let path = std::env::args().next().unwrap_or_default();
    let file = Path::new(&path)
        .file_name()
        .map(|f| f.to_string_lossy().into_owned())
        .unwrap_or_default();
    match file.rsplit_once('-') {
        Some((name, hash)) if hash.len() == 16 && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
            name.to_owned()
        }
        _ => file,
    }
}
