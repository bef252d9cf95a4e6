//! An object of another API carried inside one of ours ([`Parsed`]): kept as it was written and
//! read once into Rust types.

use serde::{Deserialize, Deserializer, Serialize, Serializer, de::DeserializeOwned};
use serde_json::Value;

/// An embedded object (an ACNP's spec, one of its rules) kept exactly as it was written — it is
/// written back unchanged, fields Strait does not read included — and read once, on arrival, as
/// `T`. One that `T` cannot read keeps the reason: the object is refused alone (a condition or a
/// skipped rule names it) instead of failing the watch of every object of its kind, which a
/// typed field would (one malformed ACNP would stop the agent's policy watch).
///
/// The raw JSON is the wire format of an open schema (`x-kubernetes-preserve-unknown-fields`):
/// the only `serde_json::Value` Strait keeps of such objects.
#[derive(Clone, Debug)]
pub struct Parsed<T> {
    raw: Value,
    read: Result<T, String>,
}

impl<T: DeserializeOwned> Parsed<T> {
    /// Reads `raw` as `T`.
    pub fn new(raw: Value) -> Self {
        let read = T::deserialize(&raw).map_err(|e| e.to_string());
        Parsed { raw, read }
    }
}

impl<T> Parsed<T> {
    /// What was read, or why it could not be.
    pub fn get(&self) -> Result<&T, &str> {
        self.read.as_ref().map_err(String::as_str)
    }

    /// What was read, if it could be.
    pub fn ok(&self) -> Option<&T> {
        self.read.as_ref().ok()
    }

    /// The object as written.
    pub fn raw(&self) -> &Value {
        &self.raw
    }
}

/// Equal when written the same (what a writer compares to know whether to write).
impl<T> PartialEq for Parsed<T> {
    fn eq(&self, other: &Self) -> bool {
        self.raw == other.raw
    }
}

impl<T> Serialize for Parsed<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.raw.serialize(s)
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Parsed<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Parsed::new(Value::deserialize(d)?))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(Debug, PartialEq, Deserialize)]
    struct Port {
        port: u16,
    }

    #[test]
    fn a_readable_object_is_read_and_written_back_as_it_came() {
        let raw = json!({"port": 80, "unknownField": [1, 2]});
        let p: Parsed<Port> = serde_json::from_value(raw.clone()).unwrap();
        assert_eq!(p.get(), Ok(&Port { port: 80 }));
        assert_eq!(serde_json::to_value(&p).unwrap(), raw);
    }

    #[test]
    fn an_unreadable_one_keeps_why_and_still_round_trips() {
        let raw = json!({"port": "http"});
        let list: Vec<Parsed<Port>> =
            serde_json::from_value(json!([{"port": 1}, raw.clone()])).unwrap();
        assert!(list[0].ok().is_some());
        let why = list[1].get().unwrap_err();
        assert!(why.contains("invalid type"), "{why}");
        assert_eq!(serde_json::to_value(&list[1]).unwrap(), raw);
    }
}
