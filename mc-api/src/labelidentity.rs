//! LabelIdentity (cluster-scoped): a normalized label and its 24-bit ClusterSet-wide ID.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(
    CustomResource, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema,
)]
#[kube(
    group = "multicluster.crd.antrea.io",
    version = "v1alpha1",
    kind = "LabelIdentity",
    plural = "labelidentities",
    printcolumn(name = "Label", type_ = "string", json_path = ".spec.label"),
    printcolumn(name = "ID", type_ = "string", json_path = ".spec.id"),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
pub struct LabelIdentitySpec {
    /// `ns:<namespace labels>&pod:<pod labels>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u32>,
}

/// The ID no label has (`0xffffff`): what a VNI says when the sender does not know the source's
/// identity, and what a gateway makes of a VNI it does not trust.
pub const UNKNOWN_ID: u32 = 0x00ff_ffff;
/// The largest ID the leader gives out.
pub const MAX_ID: u32 = UNKNOWN_ID - 1;

/// A Pod's normalized label, as Antrea writes it: `ns:<namespace labels>&pod:<Pod labels>`, each
/// set as `k=v` pairs with the keys sorted, joined by commas (the Namespace's labels include its
/// `kubernetes.io/metadata.name`).
pub fn normalized_label(
    namespace_labels: &BTreeMap<String, String>,
    pod_labels: &BTreeMap<String, String>,
) -> String {
    fn set(labels: &BTreeMap<String, String>) -> String {
        labels
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",")
    }
    format!("ns:{}&pod:{}", set(namespace_labels), set(pod_labels))
}

/// The Namespace and Pod labels a normalized label was made of; `None` when it is not one.
pub fn parse_normalized_label(
    label: &str,
) -> Option<(BTreeMap<String, String>, BTreeMap<String, String>)> {
    fn set(s: &str) -> Option<BTreeMap<String, String>> {
        s.split(',')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=')?;
                Some((k.to_owned(), v.to_owned()))
            })
            .collect()
    }
    let rest = label.strip_prefix("ns:")?;
    let (ns, pod) = rest.split_once("&pod:")?;
    Some((set(ns)?, set(pod)?))
}

/// The first 16 hex digits of the SHA-1 of a normalized label: the name of its ResourceImport
/// and LabelIdentity, and the suffix of each member's ResourceExport `<clusterID>-<hash>`.
pub fn label_hash(normalized: &str) -> String {
    use sha1::Digest as _;
    let digest = sha1::Sha1::digest(normalized.as_bytes());
    digest[..8].iter().map(|b| format!("{b:02x}")).collect()
}

/// The leader's 24-bit label IDs. Unlike Antrea, which reuses a freed ID at once, a freed ID is
/// held back for `hold` before it names another label: a packet still in flight, or a member
/// that has not yet seen the release, must not give an old Pod's traffic a new label's rights.
/// Fresh IDs are taken first; a held ID is reused only when none is left. A label is known by
/// any string that names it one to one (the leader uses its hash: its group and import name).
pub struct IdAllocator {
    by_label: BTreeMap<String, u32>,
    used: BTreeSet<u32>,
    /// The next never-issued ID.
    next: u32,
    /// Freed IDs, oldest first: ranges `first..=last` freed at the same time.
    held: VecDeque<(u32, u32, Instant)>,
    hold: Duration,
}

/// Why an ID could not be given.
#[derive(Debug, PartialEq, Eq)]
pub enum AllocError {
    /// Every ID is in use or still held back.
    Exhausted,
}

impl IdAllocator {
    pub fn new(hold: Duration) -> Self {
        Self {
            by_label: BTreeMap::new(),
            used: BTreeSet::new(),
            next: 1,
            held: VecDeque::new(),
            hold,
        }
    }

    /// The allocator of a restarted leader: the IDs its ResourceImports hold (label, ID) stay
    /// what they are; an ID given twice or out of range is left out (its label gets a new one).
    /// `issued_up_to` is the highest ID the leader ever issued, as it recorded it (0 when it
    /// did not). Every ID up to it (or up to the highest kept) that no import holds may have
    /// been freed just before the restart: it is held back from `now`.
    pub fn restored(
        hold: Duration,
        kept: impl IntoIterator<Item = (String, u32)>,
        issued_up_to: u32,
        now: Instant,
    ) -> Self {
        let mut a = Self::new(hold);
        for (label, id) in kept {
            if !(1..=MAX_ID).contains(&id)
                || a.used.contains(&id)
                || a.by_label.contains_key(&label)
            {
                continue;
            }
            a.used.insert(id);
            a.by_label.insert(label, id);
        }
        let top = a
            .used
            .last()
            .copied()
            .unwrap_or(0)
            .max(issued_up_to.min(MAX_ID));
        a.next = top + 1;
        // The gaps between kept IDs, as ranges (a few, however large the ID space).
        let mut first = 1;
        for &id in a.used.iter().chain([top + 1].iter()) {
            if id > first {
                a.held.push_back((first, id - 1, now));
            }
            first = id + 1;
        }
        a
    }

    /// The highest ID issued so far (to be recorded for [`IdAllocator::restored`]).
    pub fn issued_up_to(&self) -> u32 {
        self.next - 1
    }

    /// The ID of `label`, given now if it has none.
    pub fn id(&mut self, label: &str, now: Instant) -> Result<u32, AllocError> {
        if let Some(id) = self.by_label.get(label) {
            return Ok(*id);
        }
        let id = if self.next <= MAX_ID {
            self.next += 1;
            self.next - 1
        } else {
            match self.held.front_mut() {
                Some((first, last, freed)) if now.duration_since(*freed) >= self.hold => {
                    let id = *first;
                    if first == last {
                        self.held.pop_front();
                    } else {
                        *first += 1;
                    }
                    id
                }
                _ => return Err(AllocError::Exhausted),
            }
        };
        self.used.insert(id);
        self.by_label.insert(label.to_owned(), id);
        Ok(id)
    }

    /// `label` is gone from every cluster: its ID is held back from `now`.
    pub fn release(&mut self, label: &str, now: Instant) {
        if let Some(id) = self.by_label.remove(label) {
            self.used.remove(&id);
            self.held.push_back((id, id, now));
        }
    }

    /// The labels and their IDs.
    pub fn assigned(&self) -> &BTreeMap<String, u32> {
        &self.by_label
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::selector::labels;

    #[test]
    fn a_normalized_label_parses_back_into_its_labels() {
        let ns = labels(&[("kubernetes.io/metadata.name", "web"), ("role", "tenant")]);
        for pod in [labels(&[]), labels(&[("app", "db"), ("x.io/tier", "a-1")])] {
            let label = normalized_label(&ns, &pod);
            assert_eq!(parse_normalized_label(&label), Some((ns.clone(), pod)));
        }
        for bad in ["", "pod:a=b", "ns:a=b", "ns:a&pod:", "ns:a=b&pod:c"] {
            assert_eq!(parse_normalized_label(bad), None, "{bad}");
        }
    }

    #[test]
    fn a_pods_label_is_normalized_as_antrea_writes_it() {
        let ns = labels(&[("kubernetes.io/metadata.name", "web"), ("env", "prod")]);
        let pod = labels(&[("app", "db"), ("tier", "back")]);
        assert_eq!(
            normalized_label(&ns, &pod),
            "ns:env=prod,kubernetes.io/metadata.name=web&pod:app=db,tier=back"
        );
        assert_eq!(
            normalized_label(&ns, &labels(&[])),
            "ns:env=prod,kubernetes.io/metadata.name=web&pod:"
        );
        // `printf %s 'ns:a=b&pod:c=d' | sha1sum`: 1e5106b3b89537a1750aab83...
        assert_eq!(label_hash("ns:a=b&pod:c=d"), "1e5106b3b89537a1");
    }

    /// An allocator that has issued every ID but the last `left`.
    fn nearly_full(hold: Duration, left: u32) -> IdAllocator {
        let mut a = IdAllocator::new(hold);
        a.next = MAX_ID + 1 - left;
        a
    }

    #[test]
    fn ids_are_stable_fresh_first_and_a_freed_one_is_held_back() {
        let t0 = Instant::now();
        let hold = Duration::from_secs(600);
        let mut a = IdAllocator::new(hold);
        assert_eq!(a.id("x", t0), Ok(1));
        assert_eq!(a.id("y", t0), Ok(2));
        assert_eq!(a.id("x", t0), Ok(1));
        a.release("x", t0);
        // Not reused while fresh IDs remain, however long ago it was freed.
        assert_eq!(a.id("z", t0 + 2 * hold), Ok(3));
        assert_eq!(a.issued_up_to(), 3);

        // The last fresh ID is MAX_ID; then a held ID, only once its hold is over.
        let mut a = nearly_full(hold, 1);
        assert_eq!(a.id("p", t0), Ok(MAX_ID));
        assert_eq!(a.id("q", t0), Err(AllocError::Exhausted));
        a.release("p", t0);
        assert_eq!(a.id("q", t0 + hold / 2), Err(AllocError::Exhausted));
        assert_eq!(a.id("q", t0 + hold), Ok(MAX_ID));
        assert_ne!(MAX_ID, UNKNOWN_ID);
    }

    #[test]
    fn a_restarted_leader_keeps_every_id_and_holds_back_the_rest_of_what_it_issued() {
        let t0 = Instant::now();
        let hold = Duration::from_secs(600);
        let kept = [
            ("a".to_owned(), 5),
            ("b".to_owned(), 2),
            ("c".to_owned(), 5),          // an ID given twice: c gets a new one
            ("d".to_owned(), UNKNOWN_ID), // out of range
        ];
        // It had issued up to 7: 6 and 7 may have been freed just before the restart.
        let mut a = IdAllocator::restored(hold, kept, 7, t0);
        assert_eq!(a.id("a", t0), Ok(5));
        assert_eq!(a.id("b", t0), Ok(2));
        assert_eq!(a.id("c", t0), Ok(8));
        assert_eq!(a.id("d", t0), Ok(9));
        assert_eq!(
            a.held.iter().map(|(f, l, _)| (*f, *l)).collect::<Vec<_>>(),
            [(1, 1), (3, 4), (6, 7)]
        );
        // With no fresh ID left, the held ones come back in order once their hold is over.
        a.next = MAX_ID + 1;
        assert_eq!(a.id("e", t0 + hold / 2), Err(AllocError::Exhausted));
        for (label, id) in [("e", 1), ("f", 3), ("g", 4), ("h", 6), ("i", 7)] {
            assert_eq!(a.id(label, t0 + hold), Ok(id));
        }
        assert_eq!(a.id("j", t0 + hold), Err(AllocError::Exhausted));
        // A corrupt record near the top costs a few ranges, not 16 million entries.
        let a = IdAllocator::restored(hold, [("z".to_owned(), MAX_ID)], 0, t0);
        assert_eq!(a.held.len(), 1);
        assert_eq!(a.issued_up_to(), MAX_ID);
    }
}
