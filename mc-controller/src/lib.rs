//! Strait's multi-cluster control plane (docs/design.md §3): the leader and member controllers.
//!
//! Each role is one level-triggered loop over watch-backed stores: the desired state is computed
//! by pure functions (`leader::merge`, `leader::members`, `member::export`, `member::import`,
//! `member::gateway`) and the loop writes only the difference, so a restart or a missed event
//! converges to the same objects.

pub mod conditions;
pub mod leader;
pub mod member;
pub mod webhook;

/// How long the leader's and the member's loops let a burst of watch events land before a pass:
/// the objects one write batch of the other side creates (an export's two ResourceExports, a
/// group's ResourceImports) arrive within a millisecond or two of each other, and every export
/// crosses three loops (member, leader, member), each paying this once.
pub const SETTLE: std::time::Duration = std::time::Duration::from_millis(2);
