//! Documents' metadata: scalar values by name (string, integer, float, bool, or a list of
//! strings), given at build time (a corpus line's `metadata` object) or write time (`DocIn`).
//! Every limit is declared here once; `Metadata` is checked whenever it is deserialized, so a
//! value that passed a front end is one the BM25 index stores and a filter can match.
//!
//! Stored twice: in the document's text line (`texts.bin`, a segment's texts, the log), so a hit
//! and `GET /v1/docs/{id}` show it, and in the BM25 index's `meta` JSON field (indexed as exact
//! terms, numbers also as fast columns), which filters run on (`crate::filter`).

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tantivy::schema::OwnedValue;

/// Keys one document's metadata may hold.
pub const MAX_META_KEYS: usize = 64;
/// Bytes of a string value (and of each string of a list); strings are not empty.
pub const MAX_META_STRING_BYTES: usize = 256;
/// Strings of a list value.
pub const MAX_META_LIST: usize = 64;

/// One metadata value. Integers are exact within i64; a number with a fraction or an exponent
/// is a float.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum MetaValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<String>),
}

/// A document's metadata: values by key (at most 64 keys).
#[derive(Clone, Debug, Default, PartialEq, Serialize, JsonSchema)]
#[serde(transparent)]
pub struct Metadata(pub BTreeMap<String, MetaValue>);

impl Metadata {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.0.get(key)
    }

    /// Every rule of metadata: at most [`MAX_META_KEYS`] keys, each a name, each value within
    /// [`check_value`]; `from_json` holds a JSON object to the same, and a stream's document
    /// built in code is checked with it. The error names the key at fault.
    pub fn check(&self) -> Result<(), String> {
        check_count(self.0.len())?;
        self.0.iter().try_for_each(|(key, value)| check_entry(key, value))
    }

    /// Checked metadata from a JSON object; the error names the key at fault.
    pub fn from_json(object: serde_json::Map<String, serde_json::Value>) -> Result<Metadata, String> {
        check_count(object.len())?;
        let mut map = BTreeMap::new();
        for (key, value) in object {
            check_key(&key)?;
            let value = value_from_json(value)
                .and_then(|v| check_value(&v).map(|()| v))
                .map_err(|e| format!("metadata {key:?}: {e}"))?;
            map.insert(key, value);
        }
        Ok(Metadata(map))
    }

    /// The value of the BM25 index's `meta` field: strings stay strings (never parsed as dates).
    pub(crate) fn to_tantivy(&self) -> OwnedValue {
        let value = |v: &MetaValue| match v {
            MetaValue::Bool(b) => OwnedValue::Bool(*b),
            MetaValue::Int(i) => OwnedValue::I64(*i),
            MetaValue::Float(f) => match Indexed::of_float(*f) {
                Indexed::I64(i) => OwnedValue::I64(i),
                Indexed::U64(u) => OwnedValue::U64(u),
                Indexed::F64(f) => OwnedValue::F64(f),
            },
            MetaValue::Str(s) => OwnedValue::Str(s.clone()),
            MetaValue::List(l) => OwnedValue::Array(l.iter().map(|s| OwnedValue::Str(s.clone())).collect()),
        };
        OwnedValue::Object(self.0.iter().map(|(k, v)| (k.clone(), value(v))).collect())
    }
}

impl std::ops::Index<&str> for Metadata {
    type Output = MetaValue;

    /// The value under `key`; panics when there is none (as a map's indexing does).
    fn index(&self, key: &str) -> &MetaValue {
        &self.0[key]
    }
}

impl<'de> Deserialize<'de> for Metadata {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let object = serde_json::Map::<String, serde_json::Value>::deserialize(deserializer)?;
        Metadata::from_json(object).map_err(serde::de::Error::custom)
    }
}

/// How the BM25 index's inverted index holds a number (as tantivy's canonical form, each type
/// in its own ordered run of terms): an integer, or a float without a fraction in
/// [-2^63, 2^64), exactly as an `I64` or `U64`; 2^64 as `U64(u64::MAX)` (tantivy's own
/// rounding; no metadata value is u64::MAX, so it stands for 2^64 alone); any other float as
/// `F64`. Every value keeps its exact number, so filters compare exactly (`crate::filter`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Indexed {
    I64(i64),
    U64(u64),
    F64(f64),
}

/// 2^63 and 2^64 as floats (exact).
pub(crate) const TWO_63: f64 = 9_223_372_036_854_775_808.0;
pub(crate) const TWO_64: f64 = 18_446_744_073_709_551_616.0;

impl Indexed {
    /// A finite float's form. (tantivy would index 2^63 as `I64(i64::MAX)`, another number,
    /// so this gives it the `U64` tantivy keeps exact.)
    pub(crate) fn of_float(f: f64) -> Indexed {
        if f.fract() != 0.0 || !f.is_finite() {
            Indexed::F64(f)
        } else if (-TWO_63..TWO_63).contains(&f) {
            Indexed::I64(f as i64)
        } else if (TWO_63..TWO_64).contains(&f) {
            Indexed::U64(f as u64)
        } else if f == TWO_64 {
            Indexed::U64(u64::MAX)
        } else {
            Indexed::F64(f)
        }
    }
}

/// A key follows the one rule of names (`cellar_core::ids::check_name`: 1 to 64 ASCII letters,
/// digits, `-` or `_`), so filters name it as it is.
pub fn check_key(key: &str) -> Result<(), String> {
    cellar_core::ids::check_name("metadata key", key).map_err(|e| match e {
        cellar_core::CellarError::InvalidInput(message) => message,
        other => other.to_string(),
    })
}

/// A string value (or a list's string) is 1 to 256 bytes.
pub fn check_string(s: &str) -> Result<(), String> {
    if s.is_empty() || s.len() > MAX_META_STRING_BYTES {
        return Err(format!("strings are 1 to {MAX_META_STRING_BYTES} bytes, got {}", s.len()));
    }
    Ok(())
}

/// A JSON number as an integer (exact in i64) or a finite float.
pub(crate) fn number_from_json(n: &serde_json::Number) -> Result<MetaValue, String> {
    if let Some(i) = n.as_i64() {
        return Ok(MetaValue::Int(i));
    }
    if n.is_u64() {
        return Err(format!("{n} is beyond the 64-bit signed integers"));
    }
    match n.as_f64() {
        Some(f) if f.is_finite() => Ok(MetaValue::Float(f)),
        _ => Err(format!("{n} is not a finite number")),
    }
}

fn check_count(keys: usize) -> Result<(), String> {
    if keys > MAX_META_KEYS {
        return Err(format!("metadata holds {keys} keys; the limit is {MAX_META_KEYS}"));
    }
    Ok(())
}

/// A key and its value, the error naming the key.
fn check_entry(key: &str, value: &MetaValue) -> Result<(), String> {
    check_key(key)?;
    check_value(value).map_err(|e| format!("metadata {key:?}: {e}"))
}

/// The rules of one value: strings of 1 to 256 bytes, lists of at most [`MAX_META_LIST`] of
/// them, finite floats.
pub fn check_value(value: &MetaValue) -> Result<(), String> {
    match value {
        MetaValue::Str(s) => check_string(s),
        MetaValue::Float(f) if !f.is_finite() => Err(format!("{f} is not a finite number")),
        MetaValue::List(l) if l.len() > MAX_META_LIST => {
            Err(format!("a list holds at most {MAX_META_LIST} strings, got {}", l.len()))
        }
        MetaValue::List(l) => {
            l.iter().enumerate().try_for_each(|(i, s)| check_string(s).map_err(|e| format!("[{i}]: {e}")))
        }
        MetaValue::Bool(_) | MetaValue::Int(_) | MetaValue::Float(_) => Ok(()),
    }
}

/// A JSON value as a metadata value, by its type alone ([`check_value`] holds it to the rules).
fn value_from_json(value: serde_json::Value) -> Result<MetaValue, String> {
    use serde_json::Value;
    match value {
        Value::Bool(b) => Ok(MetaValue::Bool(b)),
        Value::Number(n) => number_from_json(&n),
        Value::String(s) => Ok(MetaValue::Str(s)),
        Value::Array(items) => {
            let strings = items.into_iter().enumerate().map(|(i, item)| match item {
                Value::String(s) => Ok(s),
                other => Err(format!("[{i}]: lists hold strings only, got {}", json_kind(&other))),
            });
            Ok(MetaValue::List(strings.collect::<Result<_, _>>()?))
        }
        other => Err(format!(
            "values are strings, numbers, booleans or lists of strings, got {}",
            json_kind(&other)
        )),
    }
}

/// What a JSON value is, for messages ("a string", "a list", ...).
pub(crate) fn json_kind(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "a list",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Metadata, String> {
        serde_json::from_str::<Metadata>(text).map_err(|e| e.to_string())
    }

    #[test]
    fn metadata_reads_each_kind_and_writes_it_back() {
        let text = r#"{"flag":true,"lang":"en","score":0.5,"tags":["a","b"],"year":2020}"#;
        let meta = parse(text).unwrap();
        assert_eq!(meta.get("year"), Some(&MetaValue::Int(2020)));
        assert_eq!(meta.get("score"), Some(&MetaValue::Float(0.5)));
        assert_eq!(meta.get("tags"), Some(&MetaValue::List(vec!["a".into(), "b".into()])));
        assert_eq!(serde_json::to_string(&meta).unwrap(), text);
        assert_eq!(parse(r#"{"x":2.0}"#).unwrap().get("x"), Some(&MetaValue::Float(2.0)));
    }

    #[test]
    fn bad_metadata_is_refused_naming_the_key() {
        for (text, says) in [
            (r#"{"a":null}"#, "\"a\": values are strings"),
            (r#"{"a":{"b":1}}"#, "an object"),
            (r#"{"a":[1]}"#, "[0]: lists hold strings only"),
            (r#"{"a":""}"#, "strings are 1 to"),
            (r#"{"a.b":1}"#, "metadata key \"a.b\""),
            (r#"{"":1}"#, "metadata key \"\""),
            (r#"{"a":18446744073709551615}"#, "beyond the 64-bit"),
            (r#"[1]"#, "invalid type"),
        ] {
            let err = parse(text).unwrap_err();
            assert!(err.contains(says), "{text}: {err}");
        }
        let many: serde_json::Map<_, _> = (0..65).map(|i| (format!("k{i}"), serde_json::json!(1))).collect();
        assert!(Metadata::from_json(many).unwrap_err().contains("65 keys"));
    }
}
