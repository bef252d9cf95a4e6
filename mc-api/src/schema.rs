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
