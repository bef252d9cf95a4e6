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

/// An embedded object Strait writes itself and reads back (the ServiceImport a ResourceImport
/// carries), read as `T` without keeping it as written: one that cannot be read keeps why, so the
/// object that carries it is reported alone instead of failing the list of every object of its
/// kind (one unreadable ResourceImport would stop the leader's loop and every member's imports).
/// Writing an unreadable one is an error: Strait only writes what it built.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrWhy<T>(pub Result<T, String>);

impl<T> OrWhy<T> {
    pub fn ok(&self) -> Option<&T> {
        self.0.as_ref().ok()
    }
}

impl<T: Serialize> Serialize for OrWhy<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match &self.0 {
            Ok(t) => t.serialize(s),
            Err(why) => Err(serde::ser::Error::custom(format!(
                "an object that could not be read is not written back: {why}"
            ))),
        }
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for OrWhy<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = Value::deserialize(d)?;
        Ok(OrWhy(T::deserialize(&v).map_err(|e| e.to_string())))
    }
}

/// For a field that may be absent: present, even as `null`, it is read (so `null` is an error
/// the field's type names, not "absent"). Use with `#[serde(default, deserialize_with)]`.
pub fn present<'de, D: Deserializer<'de>, T: DeserializeOwned>(
    d: D,
) -> Result<Option<OrWhy<T>>, D::Error> {
    OrWhy::deserialize(d).map(Some)
}

/// For a list that may be written `null`: read as empty, as an absent one. Use with
/// `#[serde(default, deserialize_with)]`.
pub fn null_as_empty<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Vec<T>, D::Error> {
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
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
    fn or_why_reads_or_says_why_and_writes_only_what_it_read() {
        let list: Vec<OrWhy<Port>> =
            serde_json::from_value(json!([{"port": 1}, {"port": null}])).unwrap();
        assert_eq!(list[0].ok(), Some(&Port { port: 1 }));
        assert!(list[1].0.as_ref().unwrap_err().contains("invalid type"));
        assert!(serde_json::to_value(&list[1]).is_err());
    }

    #[test]
    fn an_unreadable_one_keeps_why_and_still_round_trips() {
        let raw = json!({"port": "http"});
        let list: Vec<Parsed<Port>> =
            serde_json::from_value(json!([{"port": 1}, raw.clone()])).unwrap();
        assert_eq!(list[0].get(), Ok(&Port { port: 1 }));
        let why = list[1].get().unwrap_err();
        assert!(why.contains("invalid type"), "{why}");
        assert_eq!(serde_json::to_value(&list[1]).unwrap(), raw);
    }
}
