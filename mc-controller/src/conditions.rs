//! Conditions: Antrea's own struct (ClusterSet, ResourceExport) and `metav1.Condition`
//! (ServiceExport). A condition whose status did not change keeps its lastTransitionTime.

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition as MetaCondition, Time},
    jiff::Timestamp,
};
use mc_api::conditions::Condition;

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

pub fn condition(type_: &str, status: &str, reason: &str, message: &str) -> Condition {
    Condition {
        type_: Some(type_.to_owned()),
        status: Some(status.to_owned()),
        last_transition_time: Some(Time(Timestamp::now())),
        message: non_empty(message),
        reason: non_empty(reason),
    }
}

/// Copies the old lastTransitionTime when the old condition of that type has the same status.
pub fn keep_transition_time(c: &mut Condition, old: Option<&[Condition]>) {
    if let Some(prev) = old
        .into_iter()
        .flatten()
        .find(|o| o.type_ == c.type_ && o.status == c.status)
    {
        c.last_transition_time = prev.last_transition_time.clone();
    }
}

/// Same type, status, reason and message.
pub fn same(a: &Condition, b: &Condition) -> bool {
    a.type_ == b.type_ && a.status == b.status && a.reason == b.reason && a.message == b.message
}

pub fn meta_condition(
    type_: &str,
    status: &str,
    reason: &str,
    message: &str,
    old: &[MetaCondition],
) -> MetaCondition {
    let time = old
        .iter()
        .find(|o| o.type_ == type_ && o.status == status)
        .map(|o| o.last_transition_time.clone())
        .unwrap_or(Time(Timestamp::now()));
    MetaCondition {
        type_: type_.to_owned(),
        status: status.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        last_transition_time: time,
        observed_generation: None,
    }
}

/// Same types, statuses, reasons and messages, in the same order.
pub fn same_meta(a: &[MetaCondition], b: &[MetaCondition]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.type_ == y.type_
                && x.status == y.status
                && x.reason == y.reason
                && x.message == y.message
        })
}
