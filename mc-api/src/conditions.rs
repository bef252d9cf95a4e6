//! Antrea's own condition struct (not `metav1.Condition`): every field optional.

use k8s_openapi::{apimachinery::pkg::apis::meta::v1::Time, jiff::Timestamp};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub type_: Option<String>,
    /// "True", "False" or "Unknown".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

/// A condition that changes now (empty reason or message: absent).
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
