//! Conditions: Antrea's own struct (ClusterSet, ResourceExport) and `metav1.Condition`
//! (ServiceExport). A condition whose status did not change keeps its lastTransitionTime.

use k8s_openapi::{
    apimachinery::pkg::apis::meta::v1::{Condition as MetaCondition, Time},
    jiff::Timestamp,
};
pub use mc_api::conditions::{condition, keep_transition_time, same};

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
