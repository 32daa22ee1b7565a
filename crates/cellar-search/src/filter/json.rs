//! A filter's JSON: the long form (one operator per object) and the shorthand of equality
//! (`{"field": value, ...}`), read into [`Filter`] by its `Deserialize`, and the schema of both
//! (an `anyOf`) that the OpenAPI document shows.

use schemars::JsonSchema;
use serde::Deserialize;

use super::{AnyOf, Equals, Filter, Range, Scalar, MAX_FILTER_NODES, MAX_FILTER_VALUES, MAX_IN_VALUES};
use crate::meta::json_kind;

/// The operators of a filter's long form, as it is read.
const OPERATORS: [&str; 6] = ["eq", "in", "range", "and", "or", "not"];

/// A filter's long form: one operator.
#[derive(Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
#[schemars(rename = "FilterOperator")]
enum Long {
    Eq(Equals),
    In(AnyOf),
    Range(Range),
    And(#[schemars(length(min = 1, max = MAX_FILTER_NODES))] Vec<Filter>),
    Or(#[schemars(length(min = 1, max = MAX_FILTER_NODES))] Vec<Filter>),
    Not(Box<Filter>),
}

/// The value of one field in the shorthand: equal to a scalar, or to any of a list's.
#[derive(Deserialize, JsonSchema)]
#[serde(untagged)]
enum Short {
    One(Scalar),
    Any(#[schemars(length(min = 1, max = MAX_IN_VALUES))] Vec<Scalar>),
}

/// The shorthand of equality: `{"color": "red", "tags": ["a", "b"]}`.
#[derive(JsonSchema)]
#[schemars(rename = "FilterShorthand", extend("minProperties" = 1))]
#[allow(dead_code)] // only its schema is used: the shorthand is read in `Filter::deserialize`
struct Shorthand(std::collections::BTreeMap<String, Short>);

impl From<Long> for Filter {
    fn from(long: Long) -> Filter {
        match long {
            Long::Eq(e) => Filter::Eq(e),
            Long::In(a) => Filter::In(a),
            Long::Range(r) => Filter::Range(r),
            Long::And(all) => Filter::And(all),
            Long::Or(any) => Filter::Or(any),
            Long::Not(f) => Filter::Not(f),
        }
    }
}

impl Filter {
    /// A filter from its JSON: the long form (one operator key) or the shorthand of equality.
    fn from_json(value: serde_json::Value) -> std::result::Result<Filter, String> {
        let serde_json::Value::Object(map) = value else {
            return Err(format!(
                "a filter is an object: {{\"eq\": {{\"field\": ..., \"value\": ...}}}} or the shorthand \
                 {{\"field\": value}}, got {}",
                json_kind(&value)
            ));
        };
        let operators = map.keys().filter(|k| OPERATORS.contains(&k.as_str())).count();
        if operators > 0 {
            if map.len() > 1 {
                let keys: Vec<&str> = map.keys().map(String::as_str).collect();
                return Err(format!(
                    "a filter object holds one operator, or only fields (the shorthand), got keys {keys:?}: \
                     join conditions with {{\"and\": [...]}} (a field named like an operator takes the long \
                     form {{\"eq\": {{\"field\": ..., \"value\": ...}}}})"
                ));
            }
            return serde_json::from_value::<Long>(serde_json::Value::Object(map))
                .map(Filter::from)
                .map_err(|e| e.to_string());
        }
        if map.is_empty() {
            return Err("an empty filter object: give an operator or at least one field".into());
        }
        let mut all = Vec::with_capacity(map.len());
        for (field, value) in map {
            let short = serde_json::from_value::<Short>(value.clone()).map_err(|_| {
                format!(
                    "filter shorthand: field {field:?} must equal a string, number or boolean, or a list of \
                     them (for any of), got {}",
                    json_kind(&value)
                )
            })?;
            all.push(match short {
                Short::One(value) => Filter::Eq(Equals { field, value }),
                Short::Any(values) => Filter::In(AnyOf { field, values }),
            });
        }
        Ok(if all.len() == 1 { all.pop().expect("one condition") } else { Filter::And(all) })
    }
}

impl<'de> Deserialize<'de> for Filter {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Filter, D::Error> {
        let value = serde_json::Value::deserialize(deserializer)?;
        Filter::from_json(value).map_err(serde::de::Error::custom)
    }
}

impl JsonSchema for Filter {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Filter".into()
    }

    fn json_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let long = generator.subschema_for::<Long>();
        let short = generator.subschema_for::<Shorthand>();
        schemars::json_schema!({
            "description": "A condition on documents' metadata: one operator (eq, in, range, and, or, not), \
                            or the shorthand of equality {\"field\": value, ...} (a list value: any of).",
            "anyOf": [long, short],
            "x-max-values": MAX_FILTER_VALUES,
        })
    }
}
