//! `STRAIT_TEST_REQUIRE`: which missing prerequisites fail the tests instead of skipping them.
//! One file for both test suites that skip: the testbed's (this crate's `prerequisites`) and the
//! agent's kernel tests (`mc-agent/tests/support`, which includes this file by path: the two
//! share no crate a test helper could live in).

/// The environment variable that turns a skip into a failure: a comma-separated list of the
/// prerequisites (`root`, `testbed`) whose absence must fail the tests. The test command
/// (scripts/test.sh) sets `root,testbed`, so in CI nothing is skipped.
pub const REQUIRE_VAR: &str = "STRAIT_TEST_REQUIRE";

/// Whether [`REQUIRE_VAR`] names `prerequisite`; panics on a name it does not know (a typo
/// would otherwise let the tests skip silently).
pub fn required(prerequisite: &str) -> bool {
    let value = std::env::var(REQUIRE_VAR).unwrap_or_default();
    let names: Vec<&str> = value
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .collect();
    if let Some(unknown) = names.iter().find(|n| !["root", "testbed"].contains(n)) {
        panic!("{REQUIRE_VAR}={value}: unknown prerequisite {unknown:?} (known: root, testbed)");
    }
    names.contains(&prerequisite)
}
