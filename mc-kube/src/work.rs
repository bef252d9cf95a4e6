//! What a pass of a loop recomputes ([`Work`]): everything, or some keys. Its own module because
//! both the stores ([`crate::store`], which find their objects by key) and the watches
//! ([`crate::watch`], whose events mark keys) use it, and neither should depend on the other for
//! it.

use std::collections::BTreeSet;

/// What a loop recomputes on a wake-up: everything, or the desired state of some keys (each loop
/// names its own keys, for example a Service's `<namespace>/<name>`). The parts of a loop that
/// are not per key (a handful of objects) are recomputed on every wake-up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Work {
    All,
    Keys(BTreeSet<String>),
}

impl Default for Work {
    fn default() -> Self {
        Work::Keys(BTreeSet::new())
    }
}

impl Work {
    /// Whether the desired state of `key` is to be recomputed.
    pub fn covers(&self, key: &str) -> bool {
        match self {
            Work::All => true,
            Work::Keys(keys) => keys.contains(key),
        }
    }

    pub fn is_all(&self) -> bool {
        matches!(self, Work::All)
    }

    pub fn add(&mut self, key: String) {
        if let Work::Keys(keys) = self {
            keys.insert(key);
        }
    }

    pub fn merge(&mut self, other: Work) {
        match other {
            Work::All => *self = Work::All,
            Work::Keys(keys) => {
                for k in keys {
                    self.add(k);
                }
            }
        }
    }
}
