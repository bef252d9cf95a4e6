//! Schema fragments for fields whose content another API validates.

use schemars::{Schema, SchemaGenerator, json_schema};

/// An object kept as it is (`x-kubernetes-preserve-unknown-fields`).
pub fn open_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// An array of objects kept as they are.
pub fn open_object_array(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
        },
    })
}

/// The rule actions Antrea's policy CRDs accept.
pub const RULE_ACTIONS: [&str; 4] = ["Allow", "Drop", "Reject", "Pass"];

/// The ingress or egress rules of an Antrea policy: objects kept as they are, each with a
/// required `action` that is one of [`RULE_ACTIONS`] (as Antrea's CRDs validate it; the API
/// server refuses another value naming the field and the allowed values).
pub fn policy_rules(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": true,
            "required": ["action"],
            "properties": {
                "action": {"type": "string", "enum": RULE_ACTIONS},
                "name": {"type": "string"},
                "enableLogging": {"type": "boolean"},
            },
        },
    })
}
