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
